"""Tests of experiment name lookup: suffixes, ambiguity, import on miss, errors."""

import os
import subprocess
import sys
import textwrap
import uuid

from absl.testing import absltest

import paxml
from paxml import experiment_registry


def _experiment_class(module: str, name: str) -> type:
  """A class that looks as if it were defined in `module`."""
  return type(name, (), {"__module__": module})


class LookupKeysTest(absltest.TestCase):
  def test_canonical_name_is_relative_to_paxml(self):
    cls = _experiment_class("paxml.tasks.lm.params.demo", "DemoLm")
    self.assertEqual(experiment_registry.canonical_name(cls), "tasks.lm.params.demo.DemoLm")

  def test_canonical_name_outside_paxml_keeps_its_module(self):
    cls = _experiment_class("tests.main_test", "TinyLm")
    self.assertEqual(experiment_registry.canonical_name(cls), "tests.main_test.TinyLm")

  def test_every_suffix_and_the_params_free_forms(self):
    self.assertEqual(
      experiment_registry.lookup_keys("tasks.lm.params.demo.DemoLm"),
      [
        "tasks.lm.params.demo.DemoLm",
        "lm.params.demo.DemoLm",
        "params.demo.DemoLm",
        "demo.DemoLm",
        "tasks.lm.demo.DemoLm",
        "lm.demo.DemoLm",
      ],
    )

  def test_no_params_segment_means_only_suffixes(self):
    self.assertEqual(experiment_registry.lookup_keys("a.b.C"), ["a.b.C", "b.C"])

  def test_a_class_named_params_is_not_dropped(self):
    self.assertEqual(experiment_registry.lookup_keys("a.params"), ["a.params"])


class RegistryTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.registry = experiment_registry.Registry()
    self.demo = self.registry.register(_experiment_class("paxml.tasks.lm.params.demo", "DemoLm"))

  def test_register_returns_the_class_so_it_works_as_a_decorator(self):
    self.assertEqual(self.demo.__name__, "DemoLm")

  def test_every_name_form_finds_the_class(self):
    for name in [
      "tasks.lm.params.demo.DemoLm",
      "lm.params.demo.DemoLm",
      "params.demo.DemoLm",
      "demo.DemoLm",
      "tasks.lm.demo.DemoLm",
      "lm.demo.DemoLm",
      "paxml.tasks.lm.params.demo.DemoLm",
    ]:
      with self.subTest(name=name):
        self.assertIs(self.registry.get(name), self.demo)

  def test_bare_class_name_and_partial_segments_are_not_keys(self):
    for name in ["DemoLm", "mo.DemoLm", "tasks.lm.params.demo"]:
      with self.subTest(name=name):
        with self.assertRaises(experiment_registry.NotFoundError):
          self.registry.get(name)

  def test_shared_suffix_is_ambiguous_and_lists_both(self):
    vision = self.registry.register(_experiment_class("paxml.tasks.vision.params.demo", "DemoLm"))
    for name in ["demo.DemoLm", "params.demo.DemoLm"]:
      with self.subTest(name=name):
        with self.assertRaises(experiment_registry.AmbiguousNameError) as cm:
          self.registry.get(name)
        message = str(cm.exception)
        self.assertIn(f"{name!r} is ambiguous", message)
        self.assertIn("tasks.lm.params.demo.DemoLm", message)
        self.assertIn("tasks.vision.params.demo.DemoLm", message)
    # Longer names still tell them apart.
    self.assertIs(self.registry.get("lm.demo.DemoLm"), self.demo)
    self.assertIs(self.registry.get("vision.params.demo.DemoLm"), vision)

  def test_canonical_name_beats_someone_elses_suffix(self):
    short = self.registry.register(_experiment_class("paxml.lm.demo", "DemoLm"))
    self.assertIs(self.registry.get("lm.demo.DemoLm"), short)
    self.assertIs(self.registry.get("tasks.lm.demo.DemoLm"), self.demo)

  def test_reregistering_a_name_replaces_the_class(self):
    reloaded = self.registry.register(_experiment_class("paxml.tasks.lm.params.demo", "DemoLm"))
    self.assertIsNot(reloaded, self.demo)
    self.assertIs(self.registry.get("demo.DemoLm"), reloaded)
    self.assertEqual(self.registry.canonical_names(), ["tasks.lm.params.demo.DemoLm"])

  def test_typo_lists_the_closest_canonical_names(self):
    self.registry.register(_experiment_class("paxml.tasks.lm.params.demo", "DemoLmBig"))
    self.registry.register(_experiment_class("paxml.tasks.vision.params.mnist", "Mnist"))
    with self.assertRaises(experiment_registry.NotFoundError) as cm:
      self.registry.get("demo.DemoLn")
    message = str(cm.exception)
    self.assertTrue(
      message.startswith("no experiment named 'demo.DemoLn'; did you mean: "),
      message,
    )
    self.assertIn("tasks.lm.params.demo.DemoLm", message)
    self.assertNotIn("Mnist", message)
    self.assertNotIn("\n", message)

  def test_a_wild_guess_still_gets_the_nearest_names_best_first(self):
    self.registry.register(_experiment_class("paxml.tasks.vision.params.mnist", "Mnist"))
    with self.assertRaises(experiment_registry.NotFoundError) as cm:
      self.registry.get("zzz.Mnst")
    self.assertEqual(
      str(cm.exception),
      "no experiment named 'zzz.Mnst'; did you mean: "
      "tasks.vision.params.mnist.Mnist, tasks.lm.params.demo.DemoLm",
    )

  def test_empty_registry_says_so(self):
    with self.assertRaisesRegex(experiment_registry.NotFoundError, "no experiment is registered"):
      experiment_registry.Registry().get("a.B")


class PaxRegisterFormsTest(absltest.TestCase):
  def test_decorator_factory_tags_and_get_all(self):
    module = f"paxml.tasks.p31_{uuid.uuid4().hex}"
    tagged = experiment_registry.register(tags=["smoke"], allow_overwrite=True)(
      _experiment_class(module, "Tagged")
    )
    plain = experiment_registry.register()(_experiment_class(module, "Plain"))
    everything = experiment_registry.get_all()
    short = module[len("paxml.") :]
    self.assertIs(everything[f"{short}.Tagged"], tagged)
    self.assertIs(everything[f"{short}.Plain"], plain)
    self.assertEqual(experiment_registry.get_registry_tags(f"{short}.Tagged"), ["smoke"])
    self.assertEqual(experiment_registry.get_registry_tags(f"{short}.Plain"), [])
    self.assertIs(experiment_registry.get(f"{short}.Tagged"), tagged)

  def test_pax_get_none_bare_names_and_overwrite_rules(self):
    tag = uuid.uuid4().hex
    module = f"paxml.tasks.p31_{tag}"
    first = experiment_registry.register(_experiment_class(module, f"Only{tag}"))
    self.assertIsNone(experiment_registry.get(f"nothing_{tag}.Only"))
    self.assertIs(experiment_registry.get(f"Only{tag}"), first)  # A unique bare class name.
    experiment_registry.register(_experiment_class(f"paxml.tasks.q_{tag}", f"Only{tag}"))
    with self.assertRaisesRegex(ValueError, "does not uniquely identify"):
      experiment_registry.get(f"Only{tag}")
    # Another class under a taken name: an error unless allow_overwrite.
    second = _experiment_class(module, f"Only{tag}")
    with self.assertRaisesRegex(ValueError, "already registered.*allow_overwrite"):
      experiment_registry.register(second)
    self.assertIs(experiment_registry.register(second, allow_overwrite=True), second)
    self.assertIs(experiment_registry.get(f"p31_{tag}.Only{tag}"), second)
    self.assertIs(experiment_registry.register(second), second)  # The same class again is fine.

  def test_registry_helper_reset_empties_the_registry(self):
    helper = experiment_registry._ExperimentRegistryHelper  # pylint: disable=protected-access
    saved = dict(helper._registry)  # pylint: disable=protected-access
    self.addCleanup(setattr, helper, "_registry", saved)
    helper._registry = {}  # pylint: disable=protected-access
    self.assertEqual(experiment_registry.get_all(), {})
    self.assertEqual(experiment_registry.canonical_names(), [])


class GetExperimentTest(absltest.TestCase):
  """Import-on-miss, against the shared registry, with throwaway modules."""

  def _write_module(self, directory: str, module: str, body: str) -> None:
    path = os.path.join(directory, *module.split(".")) + ".py"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    parent = os.path.dirname(path)
    while parent != directory:
      open(os.path.join(parent, "__init__.py"), "a").close()
      parent = os.path.dirname(parent)
    with open(path, "w") as f:
      f.write(textwrap.dedent(body))

  def setUp(self):
    super().setUp()
    self.root = self.create_tempdir().full_path
    sys.path.insert(0, self.root)
    self.addCleanup(sys.path.remove, self.root)
    # Unique names: the shared registry and sys.modules outlive each test.
    self.tag = "m" + uuid.uuid4().hex[:8]

  def test_imports_the_module_part_then_finds_the_class(self):
    package = f"regtest_{self.tag}"
    self._write_module(
      self.root,
      f"{package}.params.exps",
      """
        from paxml import experiment_registry

        @experiment_registry.register
        class Tiny:
          pass
        """,
    )
    name = f"{package}.params.exps.Tiny"
    self.assertNotIn(f"{package}.params.exps", sys.modules)
    cls = experiment_registry.get_experiment(name)
    self.assertEqual(cls.__module__, f"{package}.params.exps")
    # Once imported, the short forms resolve without another import.
    self.assertIs(experiment_registry.get(f"{package}.exps.Tiny"), cls)

  def test_module_part_is_also_tried_under_paxml(self):
    # A directory appended to the package's search path plays the role of a
    # module inside paxml/, without writing into the source tree.
    paxml.__path__.append(self.root)
    self.addCleanup(paxml.__path__.remove, self.root)
    module = f"regtest_{self.tag}"
    self._write_module(
      self.root,
      module,
      """
        from paxml import experiment_registry

        @experiment_registry.register
        class Small:
          pass
        """,
    )
    cls = experiment_registry.get_experiment(f"{module}.Small")
    self.assertEqual(cls.__module__, f"paxml.{module}")

  def test_missing_module_says_which_modules_were_tried(self):
    with self.assertRaises(experiment_registry.NotFoundError) as cm:
      experiment_registry.get_experiment(f"no_{self.tag}.exps.Thing")
    self.assertIn(
      f"no experiment named 'no_{self.tag}.exps.Thing' (there is no module "
      f"'no_{self.tag}.exps' or 'paxml.no_{self.tag}.exps' to import)",
      str(cm.exception),
    )

  def test_module_without_that_class_lists_what_it_has(self):
    module = f"regtest_{self.tag}"
    self._write_module(
      self.root,
      module,
      """
        from paxml import experiment_registry

        @experiment_registry.register
        class RightName:
          pass
        """,
    )
    with self.assertRaises(experiment_registry.NotFoundError) as cm:
      experiment_registry.get_experiment(f"{module}.RightNam")
    self.assertIn(f"did you mean: {module}.RightName", str(cm.exception))

  def test_broken_import_inside_the_module_is_not_hidden(self):
    module = f"regtest_{self.tag}"
    self._write_module(
      self.root,
      module,
      """
        import no_such_dependency_for_this_test
        """,
    )
    with self.assertRaisesRegex(ModuleNotFoundError, "no_such_dependency_for_this_test"):
      experiment_registry.get_experiment(f"{module}.Anything")

  def test_importing_the_registry_loads_neither_jax_nor_tensorflow(self):
    code = (
      "import sys\n"
      "from paxml import experiment_registry\n"
      "heavy = sorted(m for m in ('jax', 'tensorflow', 'flax') if m in sys.modules)\n"
      "print(','.join(heavy))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
      [sys.executable, "-c", code],
      env=env,
      check=True,
      capture_output=True,
      text=True,
    )
    self.assertEqual(out.stdout.strip(), "")


if __name__ == "__main__":
  absltest.main()
