WITH snapshot AS MATERIALIZED (
    SELECT EXISTS (
        SELECT 1 FROM "{table}_permits"
         WHERE namespace = $1 AND name = $2 AND slot < $3
           AND (owner IS NULL OR expires_at IS NULL OR expires_at <= now())
    ) AS has_free
), head AS MATERIALIZED (
    SELECT fence FROM "{table}_semaphores"
     WHERE namespace = $1 AND name = $2 AND permits = $3
       AND (SELECT has_free FROM snapshot)
       {head_lock}
), free AS MATERIALIZED (
{free}), won AS (
    UPDATE "{table}_permits" p
       SET owner = $4, expires_at = now() + interval '1 microsecond' * $5::float8,
           fence = (SELECT fence FROM head) + 1
      FROM free
     WHERE p.namespace = $1 AND p.name = $2 AND p.slot = free.slot
 RETURNING p.slot, p.fence
), bumped AS (
    UPDATE "{table}_semaphores" s SET fence = won.fence
      FROM won
     WHERE s.namespace = $1 AND s.name = $2
 RETURNING s.fence
)
SELECT (SELECT permits FROM "{table}_semaphores" WHERE namespace = $1 AND name = $2),
       (SELECT slot FROM won), (SELECT fence FROM won),
       (SELECT (EXTRACT(EPOCH FROM min(expires_at) - now()) * 1000000)::BIGINT
          FROM "{table}_permits"
         WHERE namespace = $1 AND name = $2 AND owner IS NOT NULL AND expires_at > now()),
       {looked_free}
