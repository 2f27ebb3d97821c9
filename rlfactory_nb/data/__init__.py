"""What a run reads: dataset rows (jsonl, json, csv, parquet, `datasets`) and the objects that travel
from the kernel to the cluster."""
