"""Replay kernels against numpy references; replay, prioritized and sharded buffers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from orin_rl.buffers import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    ReplayError,
    ShardedReplayBuffer,
    kernels,
)

TPB = kernels.THREADS_PER_BLOCK


def ring_reference(dst, pos, src):
    out = dst.copy()
    for r in range(len(src)):
        out[(pos + r) % len(dst)] = src[r]
    return out


def tree_from_leaves(leaves: np.ndarray, capacity: int) -> np.ndarray:
    tree = np.zeros(2 * capacity)
    tree[capacity : capacity + len(leaves)] = leaves
    for node in range(capacity - 1, 0, -1):
        tree[node] = tree[2 * node] + tree[2 * node + 1]
    return tree


def stratified_reference(leaves: np.ndarray, u: np.ndarray, size: int):
    cum = np.cumsum(leaves.astype(np.float64))
    total = cum[-1]
    targets = np.minimum((np.arange(len(u)) + u) * total / len(u), total * (1 - 1e-12))
    index = np.minimum(np.searchsorted(cum, targets, side="right"), size - 1)
    return index, leaves[index]


class TestRingInsert:
    @pytest.mark.parametrize(
        ("cap", "pos", "n", "cols"),
        [(10, 0, 3, 1), (10, 8, 5, 2), (300, 290, 257, 3), (7, 6, 7, 1)],
    )
    def test_cpu_twin_and_cuda_kernel(self, rng, cap, pos, n, cols):
        dst = rng.normal(size=(cap, cols))
        src = rng.normal(size=(n, cols))
        expected = ring_reference(dst, pos, src)
        a = dst.copy()
        kernels.ring_insert_cpu(a, pos, src)
        np.testing.assert_array_equal(a, expected)
        b = dst.copy()
        kernels.ring_insert_cuda[kernels.row_launch(n, cols)](b, pos, src)
        np.testing.assert_array_equal(b, expected)


class TestUniformSample:
    @pytest.mark.parametrize("kernel", ["cpu", "cuda"])
    def test_indices_and_rows(self, rng, kernel):
        src = rng.normal(size=(50, 3))
        u = rng.random(300)
        size = 37
        dst, index = np.zeros((300, 3)), np.zeros(300, np.int64)
        if kernel == "cpu":
            kernels.sample_uniform_cpu(src, u, size, dst, index)
        else:
            kernels.sample_uniform_cuda[kernels.row_launch(300, 3)](src, u, size, dst, index)
        np.testing.assert_array_equal(index, np.minimum((u * size).astype(np.int64), size - 1))
        np.testing.assert_array_equal(dst, src[index])


class TestSumTree:
    @pytest.mark.parametrize(
        ("capacity", "size", "updates"), [(8, 5, 3), (1024, 1000, 300), (4096, 3000, 2000)]
    )
    def test_update_cpu_and_cuda_match_reference(self, rng, capacity, size, updates):
        leaves = rng.random(size)
        leaf_ids = rng.integers(0, size, updates)  # duplicates included
        values = rng.random(updates)
        expected_leaves = leaves.copy()
        for i, v in zip(leaf_ids, values, strict=True):  # last write wins, as in the kernels
            expected_leaves[i] = v
        for kind in ("cpu", "cuda"):
            tree = tree_from_leaves(leaves, capacity)
            if kind == "cpu":
                kernels.sumtree_update_cpu(tree, capacity, leaf_ids, values)
            else:
                # Duplicates in one launch are written by different threads in any order: give
                # the CUDA kernel unique ids so "last write" is well defined.
                uniq, last = np.unique(leaf_ids[::-1], return_index=True)
                vals = values[::-1][last]
                kernels.sumtree_update_cuda[1, 64](
                    tree, capacity, uniq, vals, np.zeros(len(uniq), np.int64)
                )
            np.testing.assert_allclose(
                tree, tree_from_leaves(expected_leaves, capacity), rtol=1e-12, err_msg=kind
            )

    def test_cuda_update_with_duplicate_ids_keeps_the_tree_consistent(self, rng):
        """Production passes duplicate leaf ids in one launch (a batch that sampled a
        transition twice): whichever thread's write wins, each leaf holds one of the values
        written to it and every internal node is the sum of its children."""
        capacity, size, updates = 256, 200, 150
        leaves = rng.random(size)
        leaf_ids = rng.integers(0, 40, updates)  # many duplicates
        values = rng.random(updates)
        tree = tree_from_leaves(leaves, capacity)
        kernels.sumtree_update_cuda[1, 64](
            tree, capacity, leaf_ids, values, np.zeros(updates, np.int64)
        )
        for leaf in np.unique(leaf_ids):
            assert tree[capacity + leaf] in set(values[leaf_ids == leaf])
        untouched = np.setdiff1d(np.arange(size), leaf_ids)
        np.testing.assert_array_equal(tree[capacity + untouched], leaves[untouched])
        np.testing.assert_allclose(tree[1:capacity], (tree[2::2] + tree[3::2])[: capacity - 1])

    @pytest.mark.parametrize("kind", ["cpu", "cuda"])
    def test_stratified_sample_matches_reference(self, rng, kind):
        capacity, size, batch = 1024, 700, 300
        leaves = rng.random(size) + 1e-3
        tree = tree_from_leaves(leaves, capacity)
        u = rng.random(batch)
        index, prio = np.zeros(batch, np.int64), np.zeros(batch)
        if kind == "cpu":
            kernels.sumtree_sample_cpu(tree, capacity, size, u, index, prio)
        else:
            kernels.sumtree_sample_cuda[kernels.blocks_for(batch), TPB](
                tree, capacity, size, u, index, prio
            )
        ref_index, ref_prio = stratified_reference(leaves, u, size)
        np.testing.assert_array_equal(index, ref_index)
        np.testing.assert_array_equal(prio, ref_prio)

    @settings(max_examples=40, deadline=None)
    @given(
        size=st.integers(1, 200),
        ops_list=st.lists(
            st.tuples(st.integers(0, 10_000), st.floats(0.0, 1e6, allow_nan=False)),
            min_size=1,
            max_size=60,
        ),
    )
    def test_invariant_total_is_sum_of_leaves(self, size, ops_list):
        capacity = 1 << int(np.ceil(np.log2(max(size, 1))))
        tree = np.zeros(2 * capacity)
        for leaf, value in ops_list:
            kernels.sumtree_update_cpu(tree, capacity, np.array([leaf % size]), np.array([value]))
        leaves = tree[capacity : 2 * capacity]
        assert tree[1] == pytest.approx(leaves.sum(), rel=1e-12, abs=1e-9)
        internal = np.arange(1, capacity)
        np.testing.assert_allclose(
            tree[internal], tree[2 * internal] + tree[2 * internal + 1], rtol=1e-12
        )

    @settings(max_examples=15, deadline=None)
    @given(
        priorities=st.lists(st.floats(0.01, 100.0), min_size=2, max_size=12),
        seed=st.integers(0, 2**31),
    )
    def test_sampling_frequencies_match_priorities(self, priorities, seed):
        """Chi-square goodness of fit at p = 1e-4: fails rarely by chance, always on a bias."""
        from scipy import stats

        p = np.array(priorities)
        capacity = 1 << int(np.ceil(np.log2(len(p))))
        tree = tree_from_leaves(p, capacity)
        draws = 20_000
        u = np.random.default_rng(seed).random(draws)
        index, prio = np.zeros(draws, np.int64), np.zeros(draws)
        kernels.sumtree_sample_cpu(tree, capacity, len(p), u, index, prio)
        counts = np.bincount(index, minlength=len(p))
        expected = draws * p / p.sum()
        assert stats.chisquare(counts, expected).pvalue > 1e-4


FIELDS = {"obs": ((4, 3), torch.uint8), "action": ((), torch.int64), "reward": ((), torch.float32)}


def batch_of(n, start=0):
    ids = torch.arange(start, start + n)
    return {
        "obs": (ids.view(n, 1, 1) % 256).expand(n, 4, 3).to(torch.uint8),
        "action": ids,
        "reward": ids.float() * 0.5,
    }


class TestReplayBuffer:
    def test_add_wraps_and_sample_returns_stored_rows(self):
        buf = ReplayBuffer(10, FIELDS)
        buf.add(batch_of(7))
        slots = buf.add(batch_of(6, start=7))  # wraps: ids 7..12 into slots 7,8,9,0,1,2
        assert slots.tolist() == [7, 8, 9, 0, 1, 2] and len(buf) == 10 and buf.pos == 3
        assert buf.field("action").tolist() == [10, 11, 12, 3, 4, 5, 6, 7, 8, 9]
        b = buf.sample(64)
        assert b["obs"].dtype == torch.uint8 and b["obs"].shape == (64, 4, 3)
        ids = buf.field("action")[b.indices]
        torch.testing.assert_close(b["action"], ids)
        torch.testing.assert_close(b["reward"], ids.float() * 0.5)
        torch.testing.assert_close(b["obs"][:, 0, 0], (ids % 256).to(torch.uint8))

    def test_uniform_over_stored_items(self):
        torch.manual_seed(0)
        buf = ReplayBuffer(50, FIELDS)
        buf.add(batch_of(30))
        counts = torch.bincount(buf.sample(30_000).indices, minlength=50)
        assert counts[30:].sum() == 0
        from scipy import stats

        assert stats.chisquare(counts[:30].numpy()).pvalue > 1e-4

    def test_state_dict_round_trip(self):
        buf = ReplayBuffer(8, FIELDS)
        buf.add(batch_of(5))
        buf.add(batch_of(6, start=5))  # wrapped: pos 3
        other = ReplayBuffer(8, FIELDS)
        other.load_state_dict(buf.state_dict())
        assert (other.pos, other.size) == (buf.pos, buf.size)
        for name in FIELDS:
            torch.testing.assert_close(other.field(name), buf.field(name))

    @pytest.mark.parametrize(
        ("call", "message"),
        [
            (lambda b: b.add({"obs": torch.zeros(2, 4, 3)}), "missing"),
            (lambda b: b.add({**batch_of(2), "obs": torch.zeros(2, 5, 3)}), "field 'obs'"),
            (lambda b: b.add(batch_of(11)), "exceeds the capacity"),
            (lambda b: b.sample(4), "empty"),
        ],
    )
    def test_errors(self, call, message):
        with pytest.raises(ReplayError, match=message):
            call(ReplayBuffer(10, FIELDS))


class TestPrioritized:
    def test_priorities_drive_sampling_and_weights(self):
        torch.manual_seed(0)
        buf = PrioritizedReplayBuffer(16, FIELDS, alpha=1.0, beta=1.0, eps=1e-9)
        buf.add(batch_of(4))
        # New items carry the maximum priority (1.0 initially).
        assert buf.total_priority.item() == pytest.approx(4.0)
        buf.update_priorities(torch.tensor([0, 1, 2, 3]), torch.tensor([1.0, 1.0, 1.0, 5.0]))
        assert buf.total_priority.item() == pytest.approx(8.0)
        b = buf.sample(8000)
        freq = torch.bincount(b.indices, minlength=4).float() / 8000
        torch.testing.assert_close(freq, torch.tensor([1, 1, 1, 5]) / 8.0, atol=0.02, rtol=0)
        # w_i = (N P(i))^-1 normalised by the max: items 0..2 have P = 1/8 → w ∝ 2, item 3 → 0.4
        w = {int(i): float(x) for i, x in zip(b.indices, b.weights, strict=True)}
        assert w[0] == pytest.approx(1.0) and w[3] == pytest.approx(0.2)
        # A new item enters at the running max priority (5.0).
        buf.add(batch_of(1, start=4))
        assert buf.total_priority.item() == pytest.approx(13.0)

    def test_state_dict_keeps_priorities(self):
        buf = PrioritizedReplayBuffer(8, FIELDS)
        buf.add(batch_of(5))
        buf.update_priorities(torch.arange(5), torch.arange(5).float())
        other = PrioritizedReplayBuffer(8, FIELDS)
        other.load_state_dict(buf.state_dict())
        torch.testing.assert_close(other.tree, buf.tree)


class TestSharded:
    def make(self, mode):
        return ShardedReplayBuffer([ReplayBuffer(100, FIELDS) for _ in range(3)], "cpu", mode)

    def test_round_robin_and_exact_batch(self):
        buf = self.make("round_robin")
        for start in (0, 20, 40, 60):
            buf.add(batch_of(20, start))
        assert [len(s) for s in buf.shards] == [40, 20, 20]
        b = buf.sample(97)
        assert b["action"].shape == (97,) and b.indices.shape == (97, 2)

    def test_balanced_add(self):
        buf = self.make("balanced")
        buf.add(batch_of(10))
        buf.add(batch_of(5, 10))
        assert sorted(len(s) for s in buf.shards) == [5, 5, 5]

    def test_uniform_over_all_items(self):
        np.random.seed(0)
        torch.manual_seed(0)
        buf = self.make("round_robin")
        buf.add(batch_of(60))
        buf.add(batch_of(20, 60))
        buf.add(batch_of(10, 80))  # shards of 60, 20, 10 items: ids 0..89
        ids = torch.cat([buf.sample(1000)["action"] for _ in range(30)])
        counts = torch.bincount(ids, minlength=90).numpy()
        from scipy import stats

        assert counts.sum() == 30_000 and stats.chisquare(counts).pvalue > 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("placement", ["device", "managed", "pinned"])
def test_gpu_placements(placement):
    buf = PrioritizedReplayBuffer(1000, FIELDS, "cuda", placement)
    buf.add({k: v.cuda() for k, v in batch_of(700).items()})
    b = buf.sample(256)
    assert b["obs"].is_cuda and b.weights.is_cuda
    torch.testing.assert_close(
        b["action"], buf.field("action")[b.indices.to(buf.storage_device)].cuda()
    )
    buf.update_priorities(b.indices, torch.rand(256, device="cuda"))
    leaves = buf.tree[buf.tree_capacity : buf.tree_capacity + 700].cpu().numpy()
    np.testing.assert_allclose(
        buf.tree.cpu().numpy(), tree_from_leaves(leaves, buf.tree_capacity), rtol=1e-9
    )


def test_a_buffer_larger_than_the_memory_available_is_refused_before_it_is_made(
    monkeypatch, tmp_path
):
    """MemAvailable read from /proc/meminfo; a buffer over it: one line with its bytes and
    what to lower, before any allocation (zeroing it would swap or be killed mid-run)."""
    from orin_rl.buffers import memory

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:     1000 kB\n")
    assert memory.available_bytes(str(meminfo)) == 1_024_000
    assert memory.available_bytes(str(tmp_path / "none")) is None
    monkeypatch.setattr(memory, "available_bytes", lambda: 1_024_000)
    ReplayBuffer(100, {"obs": ((84, 84), torch.uint8)})  # 0.7 MB: fits
    with pytest.raises(ReplayError, match=r"1,000 transitions of 7,056 bytes needs 0\.01 GB; this "
                                          r"machine has 0\.00 GB available: lower .*buffer_size"):  # fmt: skip
        ReplayBuffer(1_000, {"obs": ((84, 84), torch.uint8)})
