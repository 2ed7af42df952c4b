"""Quartz cron expressions: parse, and compute the next fire time in a time zone.

Pure code: no I/O, no clock reads; time is always a parameter.

Syntax (as Quartz's ``CronExpression``): 6 or 7 whitespace-separated fields,
``seconds minutes hours day-of-month month day-of-week [year]``, case-insensitive.

==============  ===========  =======================================
field           values       special characters
==============  ===========  =======================================
seconds         0-59         ``, - * /``
minutes         0-59         ``, - * /``
hours           0-23         ``, - * /``
day-of-month    1-31         ``, - * ? / L L-n W LW L-nW``
month           1-12 or JAN-DEC   ``, - * /``
day-of-week     1-7 (1 = SUN) or SUN-SAT   ``, - * ? / L nL n#k``
year            1970-2099    ``, - * /`` (the field is optional)
==============  ===========  =======================================

- ``a/b`` is a, a+b, ... up to the field's maximum; ``*/b`` and ``/b`` start at
  the field's minimum; ``a-b/c`` steps inside the range. A range whose end is
  below its start wraps around (``22-2`` hours, ``FRI-MON``, ``NOV-FEB``; for
  day-of-month the wrap is at 31), as in Quartz. Year ranges do not wrap.
- Exactly one of day-of-month and day-of-week must be ``?`` (Quartz does not
  implement specifying both).
- day-of-month ``L`` is the month's last day, ``L-n`` n days before it (n <= 30;
  no fire when that is before the 1st), ``15W`` the weekday nearest the 15th
  without leaving the month (``1W`` on a Saturday is Monday the 3rd, ``31W`` on a
  Sunday is Friday the 29th; no fire in months without a 31st), ``LW`` the last
  weekday, ``L-nW`` the weekday nearest to ``L-n``. Lists may mix these.
- day-of-week ``L`` alone is 7 (Saturday); ``6L`` is the month's last Friday;
  ``6#3`` its third Friday (``#5`` does not fire in months without a fifth such
  day). ``nL`` and ``n#k`` must be the only item of the field.
- Stricter than Quartz (which silently accepts or misreads these): a step of 0,
  ``*5``, ``1-5W``, ``0W``, and ``nL`` / ``n#k`` inside a list are errors.

Fire times are whole seconds; ``next_after(t)`` is the first one strictly after
``t`` (sub-second parts of ``t`` are dropped first, as Quartz does).

Daylight saving (what Quartz does when it walks a java ``Calendar`` in the
zone, made exact):

- A wall-clock time that does not exist (spring-forward gap, e.g. 02:30 on
  2021-03-14 in America/New_York) never fires: ``0 30 2 * * ?`` skips that day
  and fires next at 02:30 the following day, while ``0 30 * * * ?`` fires at 01:30
  EST and then 03:30 EDT. Quartz lands there because setting a non-existent hour
  on a lenient calendar moves it past the gap, after which that hour no longer
  matches.
- A wall-clock time that occurs twice (fall-back overlap) fires once, at its
  second occurrence (the standard-time one), because a java ``Calendar`` reads an
  ambiguous local time as standard time: ``0 30 1 * * ?`` fires at 01:30 EST on
  2021-11-07, not at 01:30 EDT; ``0 */15 * * * ?`` fires 00:45 EDT and then
  01:00, 01:15, 01:30, 01:45 EST (the daylight-time pass of the repeated hour
  fires nothing). Fire times are always strictly increasing in real time.

Unix cron (5 fields, ``*/5 * * * *``) and the ``@daily``-style macros are accepted at the input
boundary by :func:`to_quartz`, which returns the Quartz expression to store (see ``unix.py``).
"""

from jobring.core.cron.expression import CronExpression, resolve_zone
from jobring.core.cron.parser import (
    FIELD_NAMES,
    MAX_YEAR,
    MIN_YEAR,
    CronFields,
    CronParseError,
    DayOfMonthRule,
    DayOfWeekRule,
    parse_fields,
)
from jobring.core.cron.unix import to_quartz

__all__ = [
    "FIELD_NAMES",
    "MAX_YEAR",
    "MIN_YEAR",
    "CronExpression",
    "CronFields",
    "CronParseError",
    "DayOfMonthRule",
    "DayOfWeekRule",
    "parse_fields",
    "resolve_zone",
    "to_quartz",
]
