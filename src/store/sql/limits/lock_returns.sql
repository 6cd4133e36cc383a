-- Hold off every return of units (instances leaving RUNNING) until this transaction ends, and
-- wait for the returns in flight to commit.
lock table limit_returns in share row exclusive mode
