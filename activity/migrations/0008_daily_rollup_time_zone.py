# Rows rolled up before the calendar had a zone of its own were cut at UTC midnight: they say so.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('activity', '0007_activity_permissions'),
    ]

    operations = [
        migrations.AddField(
            model_name='dailyrollup',
            name='time_zone',
            field=models.CharField(default='UTC', help_text="The zone whose local midnights bound this day, as of the row's last rollup.", max_length=64),
            preserve_default=False,
        ),
    ]
