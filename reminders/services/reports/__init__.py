"""Report subscriptions: periods, the farm summary, subscription writes, due-time runs."""
