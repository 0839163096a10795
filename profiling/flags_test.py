import os

from absl.testing import absltest

from profiling import _pgle
from profiling import flags


class XlaFlagsTest(absltest.TestCase):
  def test_flags_for_a_profile_file_use_an_absolute_path(self):
    path = self.create_tempfile("profile.pb").full_path
    with open(path, "wb") as f:
      f.write(_pgle.serialize_profile([("fp::fusion.1", 3.0)], False))
    cwd = os.getcwd()
    os.chdir(os.path.dirname(path))
    try:
      result = flags.xla_flags("profile.pb")
    finally:
      os.chdir(cwd)
    self.assertEqual(
      result.split(" "),
      [
        "--xla_gpu_enable_latency_hiding_scheduler=true",
        f"--xla_gpu_pgle_profile_file_or_directory_path={os.path.abspath(path)}",
      ],
    )

  def test_missing_empty_and_bad_profiles_fail_here_not_in_xla(self):
    with self.assertRaisesRegex(FileNotFoundError, "pgle -- convert"):
      flags.xla_flags(os.path.join(self.create_tempdir().full_path, "none.pb"))
    empty = self.create_tempfile("empty.pb").full_path
    with self.assertRaisesRegex(ValueError, "no instruction costs"):
      flags.xla_flags(empty)
    bad = self.create_tempfile("bad.pbtxt", content="costs { nme: 1 }").full_path
    with self.assertRaisesRegex(ValueError, "text format"):
      flags.xla_flags(bad)
    self.assertIn("empty.pb", flags.xla_flags(empty, check=False))

  def test_directory_needs_profiles(self):
    directory = self.create_tempdir()
    with self.assertRaisesRegex(FileNotFoundError, "fingerprint"):
      flags.xla_flags(directory.full_path)
    directory.create_file("abc.pbtxt", content='costs { name: "abc::x" cost_us: 1 }')
    self.assertIn(directory.full_path, flags.xla_flags(directory.full_path))

  def test_whitespace_in_path_is_refused(self):
    with self.assertRaisesRegex(ValueError, "whitespace"):
      flags.xla_flags("/tmp/my profiles/p.pb", check=False)

  def test_merge_replaces_earlier_settings(self):
    merged = flags.merge_xla_flags(
      "--xla_dump_to=/d --xla_gpu_enable_latency_hiding_scheduler=false",
      "--xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_pgle_profile_file_or_directory_path=/p",
    )
    self.assertEqual(
      merged,
      "--xla_dump_to=/d --xla_gpu_enable_latency_hiding_scheduler=true "
      "--xla_gpu_pgle_profile_file_or_directory_path=/p",
    )
    self.assertEqual(flags.merge_xla_flags(None, "--a=1"), "--a=1")


if __name__ == "__main__":
  absltest.main()
