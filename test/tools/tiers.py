"""The tool suite's tiers: the markers (setup.cfg registers them) each file,
class or test of test/tools is given beside `tools`, which conftest.py gives
at collection: `needs_torch` (a real torch venv: PREGRAD_STOCK_PYTHON,
PREGRAD_UPSTREAM_PYTHON, or this interpreter's patched torch), `root`,
`network` (pip's index), `slow` (ten seconds and more) and `own_job` (a
matrix job of its own sets what it needs; the tool job leaves it out with
-m "not own_job", test/harness/matrix_jobs.py). Markers select; a skip
still guards each test at run time (prerequisites.py). test_markers.py
checks that every name here exists."""

from __future__ import annotations

from typing import Dict, Tuple

# file, file::Class or file::Class::test -> its markers (beside `tools`).
MARKS: Dict[str, Tuple[str, ...]] = {
    "test_new_base.py": ("own_job", "needs_torch", "slow"),
    "test_day_one_rehearsal.py": ("own_job", "needs_torch", "network", "slow"),
    "test_uv_end_to_end.py": ("own_job", "needs_torch", "network", "slow"),
    "test_apply_checkout.py": ("needs_torch",),
    "test_apply_checkout.py::ApplyCheckoutTest::"
    "test_unrelated_edits_apply_with_3way_or_fail_cleanly": ("slow",),
    "test_apply_wheel.py": ("needs_torch",),
    "test_bytecode.py": ("needs_torch",),
    "test_check_patches.py": ("needs_torch",),
    "test_concurrency.py": ("needs_torch", "slow"),
    "test_credentials_by_origin.py::OverlayThroughCredentialedIndexTest": ("needs_torch",),
    "test_faults.py": ("needs_torch", "slow"),
    "test_faults.py::FaultInjectionTest::"
    "test_read_only_install_as_another_user_is_refused_untouched": ("root",),
    "test_faults.py::FaultInjectionTest::"
    "test_a_real_full_disk_at_every_free_space_value_changes_nothing": ("root",),
    "test_day_one.py::LatestReleaseTest::"
    "test_a_new_release_with_a_bases_files_is_served_by_its_row": ("needs_torch",),
    "test_fleet.py": ("needs_torch",),
    "test_foreign_owners.py": ("needs_torch", "root"),
    "test_index_over_http.py::IndexOverHttp": ("needs_torch", "network"),
    "test_index_over_http.py::RealWheelOverHttp": ("needs_torch", "network"),
    "test_install_package.py": ("needs_torch",),
    "test_install_package.py::InstallPackageTest::"
    "test_a_release_build_gives_a_wheel_and_an_sdist_that_install": ("network",),
    "test_kept_kernels.py::KeptKernelsTest": ("needs_torch", "slow"),
    "test_leftovers_and_messages.py::LeftoversTest": ("needs_torch",),
    "test_leftovers_and_messages.py::LeftoversTest::"
    "test_root_applying_to_another_users_install_keeps_the_owners_ownership": ("root",),
    "test_leftovers_and_messages.py::MessagesTest::"
    "test_a_read_only_filesystem_is_named_as_such": ("root",),
    "test_matrix.py::StockExpectationTest": ("needs_torch",),
    "test_patched_wheel.py": ("needs_torch",),
    "test_planted_links.py": ("needs_torch", "root"),
    "test_run_upstream_tests.py": ("needs_torch",),
    "test_running_processes.py": ("needs_torch",),
    "test_swapped_directories.py::SwappedDirectoryRaceTest": ("needs_torch", "root", "slow"),
    "test_tools_gate.py": ("needs_torch", "slow"),
    "test_topics.py": ("needs_torch",),
    "test_uv_installs.py": ("needs_torch",),
    "test_workflow.py::DayOneWorkflowTest::"
    "test_the_workflow_is_valid_by_the_github_workflow_schema": ("network", "slow"),
}
# Classes only some of whose tests need a torch venv: those tests.
SOME_NEED_TORCH = {
    "test_error_paths.py::ErrorPathsTest": (
        "test_a_python_named_on_path_is_looked_up_there",
        "test_a_repeated_python_is_a_usage_error",
        "test_check_with_no_commit_is_a_usage_error",
        "test_lock_goes_with_a_real_wheel_build_and_names_a_file",
        "test_no_git_on_path_says_so",
        "test_revert_of_an_unpatched_tree_names_each_topic",
        "test_verify_and_model_rules_are_usage_errors"),
    "test_gpu_check.py::GpuCheckTest": (
        "test_release_is_gone_and_unknown_arguments_are_usage_errors",
        "test_the_record_check_runs_torch_backport_record_in_py",
        "test_without_cuda_it_says_so_and_writes_nothing"),
    "test_hostile_wheels.py::HostileWheelTest": (
        "test_a_huge_metadata_is_refused_before_it_is_read",
        "test_a_platform_tag_outside_pep_425_is_refused_by_the_index",
        "test_a_requires_python_outside_pep_440_is_refused_by_the_index",
        "test_member_names_that_leave_the_install_are_refused_by_the_index",
        "test_member_names_that_leave_the_install_are_refused_by_wheel"),
    "test_leftovers_and_messages.py::MessagesTest": (
        "test_a_read_only_filesystem_is_named_as_such",
        "test_an_interpreter_given_as_a_checkout_hints_at_python",
        "test_ctrl_c_at_once_is_one_line_and_130",
        "test_overlay_of_another_base_from_an_install_names_the_installs_base",
        "test_revert_of_files_edited_by_hand_is_a_refusal_that_says_so"),
    "test_reliability.py::ReliabilityTest": (
        "test_deleted_file_is_reported_missing",
        "test_hand_edited_patch_that_still_applies_is_refused_by_its_post_image",
        "test_one_file_put_back_by_hand_is_partial_then_completed_or_reverted",
        "test_overlay_refuses_listed_paths_outside_its_directory",
        "test_patch_cut_at_a_file_boundary_is_refused_everywhere",
        "test_patch_cut_mid_hunk_is_refused_by_checkout_mode_without_a_traceback",
        "test_patch_paths_are_confined_to_torch",
        "test_patched_install_without_its_backups_is_recognised",
        "test_state_dir_without_manifest_is_rolled_back",
        "test_symlinked_file_is_refused_and_stays_a_link",
        "test_upstream_runner_without_pytest_changes_nothing"),
    "test_series.py::SeriesTest": (
        "test_a_drifted_base_is_refused_naming_patch_and_file",
        "test_pristine_files_match_the_recorded_base",
        "test_series_applies_without_fuzz_to_its_base"),
}
for where, tests in SOME_NEED_TORCH.items():
    for test in tests:
        MARKS[f"{where}::{test}"] = (*MARKS.get(f"{where}::{test}", ()), "needs_torch")
