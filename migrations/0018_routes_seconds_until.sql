-- How long until a route's deadline (its circuit's open_until, its probe's
-- probe_until), read by every statement that returns a route's state: the
-- seconds from now by the database's own clock (clock_timestamp(), not the
-- transaction's start) until deadline, negative once it has passed, 0 when
-- there is none. A process turns them into deadlines of its own clock, so
-- that the processes' clocks need not agree.
--
-- VOLATILE (it reads the clock) and neither STRICT nor carrying a SET, so
-- PostgreSQL inlines it where it is used: a statement that names it is
-- planned exactly as if it spelled the expression out.
CREATE FUNCTION hookgate_seconds_until(deadline timestamptz)
RETURNS float8 LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(extract(epoch FROM deadline - clock_timestamp()), 0)::float8
$$;
