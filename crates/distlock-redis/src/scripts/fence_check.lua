-- The token check every fenced write starts with: each fence_*.lua script, and
-- every user script, is this prelude followed by its body.
-- KEYS[1] the data key (the resource itself), KEYS[2] its fence record (the
-- highest token admitted, never expires)
-- ARGV[1] the writer's token, a u64 in canonical decimal (no sign, no leading
-- zeros), as is the record.
-- Tokens are compared as that text, shorter first and then byte by byte: exact
-- for every u64, where Lua numbers (doubles) are exact only below 2^53. Digits
-- collate in numeric order in every locale, so `<` on equal lengths is numeric.
-- A lower token returns {'stale', highest} before the body runs.
local token = ARGV[1]
local highest = redis.call('GET', KEYS[2])
if highest and (#highest > #token or (#highest == #token and highest > token)) then
  return {'stale', highest}
end
-- Records the token. Bodies call it once their write has succeeded, so that a
-- write refused for the data it found records nothing.
local function admit()
  if highest ~= token then
    redis.call('SET', KEYS[2], token)
  end
end
