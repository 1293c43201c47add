"""Reading sweeps: the result-file contract (results), a loaded sweep (side), capacity statistics
(capacity, capacity_report) and the verdict, checks, `bench report` (report, summary), `bench
compare`, `bench plan` (plan, sizing, mixed_traffic), charts and pages (charts, pages, markup),
`bench publish` and `bench open` (publish, opener, answer), speculative decoding (spec). Imports
startup/ (the report's start-up section) and common/, never run/."""
