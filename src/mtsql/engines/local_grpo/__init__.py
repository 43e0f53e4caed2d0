"""The local GRPO engine (CPU or one GPU, no Ray): ``update`` (one GRPO update on verl's
``core_algos``), ``weights`` (what trains, and saving), ``trainer`` (the loop of a curriculum stage)."""
