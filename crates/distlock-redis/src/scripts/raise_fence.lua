-- Redlock: raises a node's fence counter, and the namespace's high-water, to at
-- least the token just handed out, so that any later majority, which meets
-- this node, hands out a greater one, also once the counter was collected.
-- KEYS[1] fence counter, KEYS[2] the namespace's high-water (in the counter's
-- slot); ARGV[1] the token, in decimal, ARGV[2] how long the counter is kept
-- in ms (the ttl plus state_ttl); token_lib.lua is prepended
raise_to(KEYS[1], ARGV[1])
raise_to(KEYS[2], ARGV[1])
keep_for(KEYS[1], ARGV[2])
return 1
