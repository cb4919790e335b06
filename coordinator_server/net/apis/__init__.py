"""One module per API served on the request's own path (table.py lists them): its version notes, its parse
(the hand-written parser where there is one, else or for the shapes it refuses the generic decode), its
authorization rule, its one call into the runtime and its encoder."""
