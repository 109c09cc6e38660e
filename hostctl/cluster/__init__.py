"""More than one host: the cluster profile, the cross-host plan, one project per member, and running them (README "More than one host")."""
