"""`python -m mtsql` is the `mtsql` command."""

from mtsql.app.cli import main

main()
