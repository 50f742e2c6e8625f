from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "tests.uuid_site.accounts"
    label = "uuid_accounts"
