"""Stored models: the Policy a run trains, the files it loads from (presets, folders, checkpoints),
LoRA adapters, precision, and export to a merged Hugging Face folder."""
