"""Reading sweeps: result files, capacity statistics, the verdict, report, plan, compare and pages."""
