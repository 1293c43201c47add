"""Reading sweeps: the result-file contract (results), a loaded sweep (side), capacity statistics
(capacity, capacity_report), each scenario's call and the verdict over them (verdict, decision),
checks, `bench report` (report, summary), `bench compare`, `bench plan` (plan, sizing,
mixed_traffic), charts and pages (charts, markup, and pages/: one module per page), `bench publish`
and `bench open` (publish, opener, answer), speculative decoding (spec). Imports startup/ (the
report's start-up section) and common/, never run/."""
