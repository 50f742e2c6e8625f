"""The app's management commands for the long jobs (``manage.py help``, section [activity])."""
