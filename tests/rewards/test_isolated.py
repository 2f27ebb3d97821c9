"""WorkerPool: a call that overruns its timeout is stopped (even inside one C call), and the pool
carries on with a fresh worker."""

import math
import threading
import time

import pytest

from rlfactory_nb.rewards.isolated import WorkerPool, function_name


@pytest.fixture
def pool():
    workers = WorkerPool(max_workers=2)
    yield workers
    workers.close()


def test_a_call_returns_its_result_and_reuses_the_worker(pool):
    assert pool.call(math.factorial, 10, timeout_s=30) == 3628800
    assert pool.call(math.gcd, 12, 18, timeout_s=30) == 6
    assert pool.started == 1


@pytest.mark.timeout(60)
def test_a_long_c_call_is_killed_at_the_timeout_and_the_next_call_gets_a_new_worker(pool):
    pool.call(math.factorial, 1, timeout_s=30)  # the worker is up: the timeout below measures the call alone
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="within 0.5 s"):
        pool.call(pow, 9, 9**9, timeout_s=0.5)  # one big-integer power: no signal handler could run
    assert time.monotonic() - started < 5
    assert pool.call(math.factorial, 5, timeout_s=30) == 120
    assert pool.started == 2


def test_an_exception_in_the_worker_is_raised_here_and_the_worker_kept(pool):
    with pytest.raises(RuntimeError, match="math:sqrt in a worker process raised ValueError: math domain error"):
        pool.call(math.sqrt, -1, timeout_s=30)
    assert pool.call(print, "printed by the worker", timeout_s=30) is None  # prints reach stderr, not a reply
    assert pool.call(math.sqrt, 4, timeout_s=30) == 2.0
    assert pool.started == 1


def test_calls_from_several_threads_share_the_bounded_pool(pool):
    results = {}

    def work(n):
        results[n] = pool.call(math.factorial, n, timeout_s=30)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: math.factorial(n) for n in range(6)}
    assert pool.started <= 2


def test_a_function_a_worker_cannot_import_is_refused():
    def local():
        return 1

    with pytest.raises(ValueError, match="top level of an importable module"):
        function_name(local)
