"""Nucleus (top-p) sampling without a whole-vocabulary sort (`ragjax.sampling.sample`): the
nucleus by hand, the draw the same whether it was found among the candidates or by the full
sort, a row's token independent of the rows beside it, and the frequencies of the nucleus
distribution."""

import jax
import jax.numpy as jnp
import numpy as np

from ragjax.sampling.sample import nucleus_sample, sample_tokens

P = np.array([0.5, 0.3, 0.15, 0.05])          # top_p 0.7: before = 0, .5, .8, .95 -> {0, 1}


def keys(n, seed=0):
  return jax.random.split(jax.random.PRNGKey(seed), n)


def draw(logits, ks, top_p, candidates):
  tok, lp = jax.jit(nucleus_sample, static_argnums=3)(jnp.asarray(logits, jnp.float32), ks,
                                                      top_p, candidates)
  return np.asarray(tok), np.asarray(lp)


def test_the_nucleus_by_hand_and_the_same_draw_from_candidates_or_the_full_sort():
  n = 4000
  logits = np.tile(np.log(P), (n, 1))
  ks = keys(n)
  # candidates 1: mass 0.5 < 0.7, the full sort; 2: mass 0.8 holds it; 4: the whole vocabulary
  (t1, l1), (t2, l2), (t4, l4) = (draw(logits, ks, 0.7, c) for c in (1, 2, 4))
  assert np.array_equal(t1, t2) and np.array_equal(t2, t4)
  assert set(t2.tolist()) == {0, 1}
  np.testing.assert_allclose(l2, np.log(np.where(t2 == 0, 0.625, 0.375)), rtol=1e-5)
  np.testing.assert_allclose(l1, l2, rtol=1e-6)
  share = (t2 == 0).mean()                  # 0.625, sd sqrt(.625 * .375 / 4000) = 0.0077
  assert abs(share - 0.625) < 4 * 0.0077, share


def test_ties_go_to_the_lower_id_and_the_top_token_is_always_kept():
  t, lp = draw(np.zeros((500, 6)), keys(500, 1), 0.45, 2)     # six equal: before 0, 1/6, 2/6, 3/6
  assert set(t.tolist()) == {0, 1, 2}
  np.testing.assert_allclose(lp, np.log(1 / 3), rtol=1e-5)
  t, lp = draw(np.tile(np.log(P), (50, 1)), keys(50, 2), 1e-6, 2)
  assert (t == 0).all() and np.allclose(lp, 0.0, atol=1e-6)


def test_a_rows_token_does_not_depend_on_the_rows_beside_it():
  """Row 0 holds its nucleus among 2 candidates; beside a flat row (which needs the full sort)
  or beside a copy of itself it draws the same token."""
  peaked, flat = np.log(P), np.zeros(4)
  for seed in range(20):
    ks = keys(2, seed)
    a, _ = draw(np.stack([peaked, flat]), ks, 0.7, 2)
    b, _ = draw(np.stack([peaked, peaked]), ks, 0.7, 2)
    assert a[0] == b[0]


def test_sample_tokens_takes_the_nucleus_path_with_its_log_probs():
  n = 64
  logits = jnp.asarray(np.tile(np.log(P), (n, 1)), jnp.float32)
  tok, lp, slp = jax.jit(lambda l, k: sample_tokens(
      l, k, None, greedy=False, temperature=1.0, top_k=0, top_p=0.7, nucleus=True,
      candidates=2))(logits, keys(n))
  tok = np.asarray(tok)
  assert set(tok.tolist()) <= {0, 1}
  np.testing.assert_allclose(np.asarray(lp), np.log(P[tok]), rtol=1e-5)   # the model's
  np.testing.assert_allclose(np.asarray(slp), np.log(np.where(tok == 0, .625, .375)), rtol=1e-5)


def test_the_benchmark_at_toy_size():
  from ragjax.bench import nucleus
  r = nucleus.main(["--batch", "4", "--vocab", "256", "--candidates", "16", "--repeats", "1"])
  assert r["peaked"]["rows_held_by_candidates"] == 1.0 and r["flat"]["rows_held_by_candidates"] == 0.0
  assert r["peaked"]["same_tokens"] and r["flat"]["same_tokens"]
  assert r["peaked"]["ms_candidates"] > 0 and r["flat"]["ms_full_sort"] > 0
