"""Several bridges share the groups: the bridges' group, leases, owners and the partition gate."""
