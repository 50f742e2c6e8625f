-- wrk script for bench/http.py: the request's method and body, and a JSON summary at the end.
-- Arguments (after wrk's --): METHOD [BODY_FILE]; a body is sent as application/json.
-- Headers (cookies, Authorization) come from wrk's -H options.

function init(args)
  wrk.method = args[1] or "GET"
  if args[2] then
    local file = assert(io.open(args[2], "rb"))
    wrk.body = file:read("*a")
    file:close()
    wrk.headers["Content-Type"] = "application/json"
  end
end -- wrk then builds the request once from these fields

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, ' ..
      '"connect_errors": %d, "read_errors": %d, "write_errors": %d, "timeouts": %d, "bad_status": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    errors.connect, errors.read, errors.write, errors.timeout, errors.status))
end
