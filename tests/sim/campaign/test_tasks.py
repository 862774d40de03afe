"""How a campaign's configurations are cut into tasks (``plan_tasks``), checked by hand."""

from __future__ import annotations

from sim.campaign.run import MAX_TASK, TASK_SECONDS, plan_tasks


def _items(n: int) -> list[tuple[str, dict[str, int]]]:
    return [(f"k{i}", {"i": i}) for i in range(n)]


def test_tasks_keep_order_and_shrink_at_the_end() -> None:
    # 1,000 configurations of 10 ms: TASK_SECONDS / 0.01 = 50 a task; 2 workers
    assert TASK_SECONDS == 0.5
    tasks = plan_tasks(_items(1000), 0.01, 2)
    flat = [k for t in tasks for k, _ in t]
    assert flat == [f"k{i}" for i in range(1000)]  # each once, in the expansion's order
    sizes = [len(t) for t in tasks]
    # by hand: a task takes min(50, max(ceil(left / (2 x 2)), ceil(50 / 8) = 7)); full while 200 or more are
    # left (17 tasks: 150 left), then ceil(150/4) = 38, 28 (112 left), 21 (84), 16 (63), 12 (47), 9 (35),
    # 7 (26: the floor from here), 7 (19), 7 (12), and the last 5
    assert sizes == [50] * 17 + [38, 28, 21, 16, 12, 9, 7, 7, 7, 5]


def test_small_campaigns_give_each_worker_four_tasks_and_big_tasks_are_capped() -> None:
    assert [len(t) for t in plan_tasks(_items(8), 1.0, 2)] == [1] * 8
    assert [len(t) for t in plan_tasks(_items(40), 1e-6, 1)][:2] == [10, 10]  # 40 / (4 x 1)
    assert max(len(t) for t in plan_tasks(_items(100_000), 1e-9, 1)) == MAX_TASK
    assert plan_tasks([], 0.01, 2) == []
