-- A throttled attempt: the agent reports that a quota refused it (an HTTP 429, say) and when to
-- try again (`fail` with `retry_after_seconds`). The instance goes back to PENDING at that time
-- with its attempt unspent, recorded as error_kind 'throttled'.
--
-- Only widens the set of allowed values: replicas of the previous release never write it.
-- NOT VALID: the rows already stored satisfy the narrower check they were written under, and
-- validating would scan the whole table inside this migration's transaction, which holds the
-- table's lock from the drop until the commit. New and updated rows are checked either way.
alter table task_instance drop constraint task_instance_error_kind_check;
alter table task_instance add constraint task_instance_error_kind_check
    check (error_kind in ('agent', 'timeout', 'lease_expired', 'dispatch', 'cancelled',
                          'throttled')) not valid;
