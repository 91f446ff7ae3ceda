"""The planted scripts are the doctor's patients: never collected, imported or doctested."""

collect_ignore_glob = ["scripts/*"]
