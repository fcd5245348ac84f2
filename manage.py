#!/usr/bin/env python
"""Django's command-line entry point for Farm Automation Core."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")
    from common.audit.context import command_line_execute
    from config.env import setting_errors_exit

    # A malformed or missing variable: its one line on stderr and a non-zero exit.
    setting_errors_exit(lambda: command_line_execute(sys.argv))


if __name__ == "__main__":
    main()
