"""The all-ranks doctor (`distrain run … -m distrain.tools.doctor`): every rank checks in
(:mod:`.ranks`), is judged against the others (:mod:`.rank_checks`), and every node-to-node link
is measured (:mod:`.links`)."""
