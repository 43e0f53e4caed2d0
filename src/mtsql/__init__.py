"""mtsql: reproduce MTSQL-R1 long-horizon multi-turn text-to-SQL training."""

__version__ = "0.1.0"
