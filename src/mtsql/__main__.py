"""`python -m mtsql` is the `mtsql` command."""

from mtsql.cli import main

main()
