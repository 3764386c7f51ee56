"""The tool suite's own gate, as the stock gate is the compile suites': each
rule below is broken on purpose in a copy of the product, and the test that
guards it must then fail. A test that passes against the broken copy checks
nothing; a break that no longer applies (the code moved) fails here too, so
the list is kept in step with the code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import unittest
from pathlib import Path
from typing import NamedTuple

import pytest

from fake_install import REPO, ScratchTestCase


class Break(NamedTuple):
    """`old` replaced by `new` (once, exactly) in `path`: `test` must fail."""
    rule: str
    path: str
    old: str
    new: str
    test: str


BREAKS = [
    Break("an option's help is the table's, for every mode",
          "torch_backport/options.py", "        if mode in option.help:\n",
          "        if mode in option.help and option.name != \"--lock\":\n",
          "test_options.py::OptionTableTest::"
          "test_the_help_describes_every_option_of_the_table"),
    Break("an error is said with the command as typed",
          "torch_backport/infra/errors.py", 'print(f"{command}: {problem}"',
          'print(f"error: {problem}"',
          "test_apply_wheel.py::ApplyWheelTest::"
          "test_apply_refuses_a_modified_install_and_changes_nothing"),
    Break("--model without --verify is a usage error, not a silent no-op",
          "torch_backport/cli.py", 'return [(request.command != "verify", "--model goes with',
          'return [(False, "--model goes with',
          "test_error_paths.py::ErrorPathsTest::test_verify_and_model_rules_are_usage_errors"),
    Break("a patch that applies but leaves another post-image is refused",
          "torch_backport/patchset/apply.py", "if blob != diff.post_blob:", "if False:",
          "test_reliability.py::ReliabilityTest::"
          "test_hand_edited_patch_that_still_applies_is_refused_by_its_post_image"),
    Break("files that differ from RECORD are refused",
          "torch_backport/installed/mode.py",
          '    if status.state is State.MODIFIED:\n        what = ("the series is applied',
          '    if False:\n        what = ("the series is applied',
          "test_apply_wheel.py::ApplyWheelTest::"
          "test_apply_refuses_a_modified_install_and_changes_nothing"),
    Break("an optional topic without a series is not available, not a failure",
          "torch_backport/patchset/series.py", "return not named and not self.primary",
          "return False",
          "test_topics.py::TopicsWheelTest::"
          "test_status_calls_an_opt_in_topic_without_a_series_not_available"),
    Break("every topic is planned before any is written",
          "torch_backport/patchset/driver.py",
          "plans = [make_plan(mode, command, topic, named, tried=len(chosen) > 1)\n"
          "             for topic in chosen]",
          "plans = (make_plan(mode, command, topic, named, tried=len(chosen) > 1)\n"
          "             for topic in chosen)",
          "test_topics.py::TopicsWheelTest::"
          "test_all_topics_are_refused_together_when_one_cannot_apply"),
    Break("a refused checkout run leaves ORIG_HEAD as it was",
          "torch_backport/checkout/mode.py",
          '    if before:\n        git("update-ref", "--no-deref", "ORIG_HEAD"',
          '    if False:\n        git("update-ref", "--no-deref", "ORIG_HEAD"',
          "test_apply_checkout.py::ApplyCheckoutTest::"
          "test_refuses_a_conflict_naming_patch_file_and_line"),
    Break("a checkout whose history held a base's files gets that base",
          "torch_backport/checkout/base.py", "    if floor:\n", "    if False:\n",
          "test_apply_checkout.py::ApplyCheckoutTest::"
          "test_every_touched_file_changed_since_the_release_still_finds_its_base"),
    Break("an overlay never replaces a directory holding files it did not write",
          "torch_backport/generated/overlay.py", "    if foreign:\n", "    if False:\n",
          "test_apply_wheel.py::ApplyWheelTest::"
          "test_overlay_refuses_a_directory_it_did_not_fill"),
    Break("a patched wheel is read against the source wheel's RECORD",
          "torch_backport/generated/patched_wheel.py",
          "        data: bytes = wheel.read(name)",
          "        data: bytes = zipfile.ZipFile.open(wheel, name).read()",
          "test_patched_wheel.py::PatchedWheelTest::"
          "test_a_file_that_does_not_match_record_is_refused"),
    Break("credentials go to their origin: scheme, host and port",
          "torch_backport/download/pip_config.py",
          "for known, login in self.logins if origin(known) == wanted]",
          "for known, login in self.logins if origin(known)[1] == wanted[1]]",
          "test_credentials_by_origin.py::RedirectsTest::"
          "test_each_redirect_code_to_another_port_sends_no_credentials"),
    Break("a reply whose declared length is past the range is refused before its body",
          "torch_backport/download/transport.py",
          "if declared.isdigit() and int(declared) > limit:",
          "if False:",
          "test_hostile_replies.py::LongReplyTest::"
          "test_a_declared_length_past_the_range_is_refused_before_the_body"),
    Break("a member whose zip size is not RECORD's is not read",
          "torch_backport/download/release_wheels.py",
          "    if info.file_size != size or info.compress_size",
          "    if False and info.compress_size",
          "test_hostile_replies.py::LyingZipTest::"
          "test_a_zip_bomb_member_is_refused_before_it_is_inflated"),
    Break("a RECORD entry the zip lacks is an error",
          "torch_backport/download/release_wheels.py",
          "        if rel in listed and rel not in names:",
          "        if False:",
          "test_hostile_replies.py::LyingZipTest::test_a_record_entry_the_zip_lacks_is_an_error"),
    Break("member names that climb out of the install are refused",
          "torch_backport/infra/record.py", '    if ".." in name.split("/"):', "    if False:",
          "test_hostile_wheels.py::HostileWheelTest::"
          "test_member_names_that_leave_the_install_are_refused_by_the_index"),
    Break("temporary files are created exclusively, never at a name planted in advance",
          "torch_backport/infra/dirfd.py",
          "            name = self.temp_name(target)\n            try:\n"
          "                self.new_file(name, data, mode, owner)\n",
          '            name = f".{target}{TEMP_SUFFIX}"\n            try:\n'
          "                os.write(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode,\n"
          "                                 dir_fd=self.fd), data)\n",
          "test_planted_links.py::PlantedLinksTest::"
          "test_the_index_is_written_past_links_at_the_old_temporary_names"),
    Break("within an origin, the longest configured path gives the credentials",
          "torch_backport/download/pip_config.py",
          "return max(under, key=lambda found: found[0])[1]", "return under[0][1]",
          "test_credentials_by_origin.py::CredentialsByOriginTest::"
          "test_two_indexes_on_one_origin_each_get_their_own_by_longest_path"),
    Break("a proxy without a scheme is refused",
          "torch_backport/download/transport.py", 'if proxy and "://" not in proxy:',
          "if False:",
          "test_pip_settings.py::ProxyTest::"
          "test_a_proxy_without_a_scheme_is_refused_not_stripped_of_its_login"),
    Break("NO_PROXY takes networks, as requests does",
          "torch_backport/download/transport.py",
          "if address in ipaddress.ip_network(entry, strict=False):", "if False:",
          "test_pip_settings.py::ProxyTest::test_no_proxy_takes_a_network_as_requests_does"),
    Break("what a server says is printed escaped",
          "torch_backport/infra/errors.py",
          'return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)',
          "return text",
          "test_hostile_replies.py::WhatAServerSaysTest::"
          "test_a_location_with_terminal_escapes_is_printed_escaped"),
    Break("a cache another user owns is not used",
          "torch_backport/infra/fsio.py", "        if found.st_uid not in owners:",
          "        if False:",
          "test_foreign_owners.py::ForeignCacheTest::"
          "test_a_file_another_user_owns_in_the_cache_is_refused_by_name"),
    Break("a backup directory others may write to is not trusted",
          "torch_backport/infra/fsio.py",
          "if stat.S_ISDIR(found.st_mode) and found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):",
          "if False:",
          "test_foreign_owners.py::ForeignStateTest::"
          "test_a_backup_another_user_swapped_is_not_put_back"),
    Break("a file is read only where it is a regular file",
          "torch_backport/infra/fsio.py", "        if not stat.S_ISREG(found.st_mode):\n"
          "            raise NotARegularFile(",
          "        if False:\n            raise NotARegularFile(",
          "test_foreign_owners.py::ForeignIndexDirectoryTest::"
          "test_a_fifo_named_like_a_wheel_is_refused_without_waiting"),
    Break("a directory is opened without following a link",
          "torch_backport/infra/dirfd.py",
          "OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC",
          "OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC",
          "test_swapped_directories.py::SwappedAtEveryStepTest::"
          "test_apply_swapped_at_every_step_writes_nothing_outside"),
    Break("git has ended before an error goes on",
          "torch_backport/infra/git.py", "            process.kill()\n            process.wait()\n",
          "            pass\n",
          "test_leftovers_and_messages.py::CtrlCHandOverTest::"
          "test_git_has_ended_before_an_error_goes_on"),
    Break("comments name the package's files and modules as they are now",
          "torch_backport/installed/state.py", "Finding the state is status.py;",
          "Finding the state is wheel_status.py;",
          "test_shape.py::ShapeTest::test_files_and_modules_are_named_as_they_are_now"),
    Break("exit statuses are named in infra/exit_codes.py",
          "maint/update_docs.py", "        return Exit.FAILED\n", "        return 1\n",
          "test_shape.py::ShapeTest::test_exit_statuses_are_named_in_one_module"),
]

COPIED = ("setup.cfg", "upstream-tests.txt", "torch_backport", "maint", "patches", "scripts",
          "test/tools", "test/harness")


# The guarded tests make small installs from both real torch venvs: without
# them they skip, and a skip is no failure (conftest.py's fixtures skip here too).
@pytest.mark.usefixtures("stock_python", "upstream_python")
class ToolsGateTest(ScratchTestCase):
    def broken_copy(self, broken: Break) -> Path:
        copy = self.tmp / "project"
        copy.mkdir()
        for part in COPIED:
            if (REPO / part).is_dir():
                shutil.copytree(REPO / part, copy / part,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(REPO / part, copy / part)
        target = copy / broken.path
        text = target.read_text()
        self.assertEqual(text.count(broken.old), 1,
                         f"the break of {broken.rule!r} no longer applies to {broken.path}; "
                         "bring test_tools_gate.py in step with the code")
        target.write_text(text.replace(broken.old, broken.new))
        return copy

    def test_each_guarded_rule_fails_its_test_when_broken(self) -> None:
        for broken in BREAKS:
            with self.subTest(rule=broken.rule):
                self.assertTrue((REPO / "test" / "tools" / broken.test.split("::")[0]).is_file())
                copy = self.broken_copy(broken)
                result = subprocess.run(
                    [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                     f"test/tools/{broken.test}"],
                    cwd=copy, capture_output=True, text=True,
                    env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
                shutil.rmtree(copy)
                # 1: the test ran and failed. 4 or 5 would be a test that is gone.
                self.assertEqual(result.returncode, 1,
                                 f"{broken.test} did not fail with {broken.rule!r} broken:\n"
                                 + result.stdout[-2000:])


if __name__ == "__main__":
    unittest.main()
