"""The plan dsv4ctl makes: the request (`request`), what it is planned from (`inputs`, `devices`, `memory`,
`calibration`), the one safe-length rule (`safe_length`), what would fit (`alternatives`), the flags to pass
(`flags`), the steps (`fit.plan_fit`) and the answer (`result`). Changes when dsv4ctl's advice changes."""
