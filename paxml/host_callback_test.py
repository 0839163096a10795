"""Tests of host_callback's string repository."""

import threading

from absl.testing import absltest

from paxml import host_callback


class RepositoryTest(absltest.TestCase):
  def test_add_get_pop(self):
    repo = host_callback.Repository()
    ids = [repo.add(s) for s in ("a", "b", "a")]
    self.assertEqual(ids, [0, 1, 2])
    self.assertEqual([repo.get(i) for i in ids], ["a", "b", "a"])
    self.assertTrue(repo.pop(1))
    self.assertFalse(repo.pop(1))
    self.assertEqual(repo.size, 2)
    with self.assertRaisesRegex(KeyError, "id 1"):
      repo.get(1)

  def test_evicts_oldest_remaining_even_after_pops(self):
    repo = host_callback.Repository(max_size=2)
    first, second = repo.add("x"), repo.add("y")
    repo.pop(first)
    third, fourth = repo.add("z"), repo.add("w")  # 'y' is the oldest left: evicted.
    self.assertEqual(repo.size, 2)
    with self.assertRaises(KeyError):
      repo.get(second)
    self.assertEqual((repo.get(third), repo.get(fourth)), ("z", "w"))

  def test_namespaces_are_shared_singletons_and_thread_safe(self):
    self.assertIs(host_callback.repository("p31_a"), host_callback.repository("p31_a"))
    self.assertIsNot(host_callback.repository("p31_a"), host_callback.repository("p31_b"))
    repo = host_callback.repository("p31_threads")
    threads = [
      threading.Thread(target=lambda: [repo.add("s") for _ in range(200)]) for _ in range(4)
    ]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
    self.assertEqual(repo.size, 800)
    self.assertEqual(repo.add("last"), 800)  # Ids are unique across threads.


if __name__ == "__main__":
  absltest.main()
