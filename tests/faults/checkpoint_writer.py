"""A separate process that writes checkpoints into a folder, for faults that need a real process:

    python checkpoint_writer.py FOLDER kill-mid-write   saves step 1, then dies by SIGKILL inside step 2
    python checkpoint_writer.py FOLDER fill-disk        saves step 1, then step 2 on a disk too small for it

Prints one JSON line: what it saw (the disk-full case checks the previous checkpoint itself, because
its tmpfs vanishes with the mount namespace it runs in).
"""

import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tiny_models import random_qwen3

from rlfactory_nb.models import checkpoint as ckpt
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.models.presets.tokenizer import build_tokenizer


def main(folder: str, mode: str) -> None:
    model, tokenizer = random_qwen3(), build_tokenizer()
    ckpt.save_checkpoint(folder, 1, model, tokenizer, {})
    if mode == "kill-mid-write":
        real_save = ckpt.torch.save

        def save_then_die(*args, **kwargs):  # weights and tokenizer are written; the state is half done
            real_save(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)

        ckpt.torch.save = save_then_die
        ckpt.save_checkpoint(folder, 2, model, tokenizer, {})
        return
    try:
        ckpt.save_checkpoint(folder, 2, model, tokenizer, {"big": bytes(8 * 2**20)})
        error = None
    except ckpt.CheckpointError as raised:
        error = str(raised)
    latest = ckpt.load_latest(folder)
    loads = Policy.load(latest.path, device="cpu").num_parameters > 0
    leftovers = [p.name for p in ckpt.checkpoint_dir(folder).iterdir() if p.name.startswith(".")]
    print(json.dumps({"error": error, "latest": latest.step, "loads": loads, "leftovers": leftovers}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
