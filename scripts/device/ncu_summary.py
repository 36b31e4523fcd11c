"""Summarises an Nsight Compute --csv report (on stdin) for the profile_decode*.sh scripts: one line per
(kernel, metric) with the value and unit; warp-stall metrics get short names ("stall long_scoreboard")."""
import csv
import sys

lines = [line for line in sys.stdin if line.startswith('"')]  # ncu's own log lines are not CSV rows
rows = list(csv.reader(lines))
if rows:
    hdr = rows[0]
    for r in rows[1:]:
        d = dict(zip(hdr, r))
        name = d.get("Metric Name", "").replace("smsp__average_warps_issue_stalled_", "stall ")
        name = name.replace("_per_issue_active.ratio", "")
        print("  %-40s %-60s %s %s" % (d.get("Kernel Name", "")[:40], name, d.get("Metric Value", ""),
                                       d.get("Metric Unit", "")))
