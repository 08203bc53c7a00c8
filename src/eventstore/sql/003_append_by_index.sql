-- Version 3 (issue 34; docs/performance.md "Appends look up by index, whatever the plan cache"):
-- es_append's statements find streams and event ids through their indexes, always. PL/pgSQL
-- caches each statement's plan per connection, and a generic plan made while es_events was still
-- small scanned the whole table for the event ids of every later call: appends slowed as the log
-- grew (bench/support/log.ts's generator: 3,500 events/s at first, 550 after 50,000 events), and a
-- pool's connections keep such plans for their life. The apply functions of the read models
-- (src/projections/sql/) set the same for the same reason.
ALTER FUNCTION es_append SET enable_seqscan = off;
