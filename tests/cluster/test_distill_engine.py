"""On-policy distillation on the cluster: a one-step run of the Ray backend starts the teacher as an
engine actor of its own beside the policy's, scores the student's rows there, and trains on the KL
alone; the loss falls on the sampled tokens only, as computed by hand
(tests/train/test_distill.py holds the run's config and the hand computation)."""

import pytest

from rlfactory_nb.train.loop import Trainer
from rlfactory_nb.train.metrics import read_metrics
from rlfactory_nb.train.run_folder import RunFolder
from tests.train.test_distill import COEF, check_against_hand_computation, one_step_config

pytestmark = pytest.mark.slow


async def test_a_one_step_distillation_run_scores_on_a_teacher_engine_actor(cluster, tmp_path):
    cfg = one_step_config(
        tmp_path / "runs", cluster__backend="ray", cluster__cpus_per_worker=0.5, cluster__object_store_memory_gb=0.3,
        distill={"teacher": "tiny-guess", "coef": COEF, "only": True, "num_cpus": 0.5},
    )  # fmt: skip
    trainer = Trainer(cfg)
    try:
        await trainer.start()
        teacher = trainer.backend.teacher
        assert teacher.name.startswith("rlfactory-nb-engine:teacher-") and teacher.name in cluster.engines()
        assert f"teacher engine actor {teacher.name}" in trainer.backend.actors()
        await trainer.run()
    finally:
        await trainer.close()
    (row,) = read_metrics(cfg.run_dir)
    check_against_hand_computation(row, RunFolder(cfg.run_dir).load_trajectories(1), COEF)
    assert teacher.name not in cluster.engines()  # stopped with the run


async def test_a_running_engine_actor_can_be_the_teacher_and_is_left_running(cluster, tmp_path):
    """`distill.teacher: engine:NAME`: the run scores on an engine the kernel started, and leaves it running."""
    engine = cluster.engine("tiny-guess", label="kernel-teacher", num_cpus=0.5)
    cfg = one_step_config(
        tmp_path / "runs", cluster__backend="ray", cluster__cpus_per_worker=0.5, cluster__object_store_memory_gb=0.3,
        distill={"teacher": f"engine:{engine.name}", "coef": COEF, "only": True, "num_cpus": 0.5},
    )  # fmt: skip
    try:
        trainer = Trainer(cfg)
        try:
            await trainer.start()
            assert trainer.backend.teacher.name == engine.name and not trainer.backend.teacher.owned
            await trainer.run()
        finally:
            await trainer.close()
        assert engine.name in cluster.engines() and len(await engine.score([1, 2, 3])) == 2
        (row,) = read_metrics(cfg.run_dir)
        check_against_hand_computation(row, RunFolder(cfg.run_dir).load_trajectories(1), COEF)
    finally:
        await engine.close()
