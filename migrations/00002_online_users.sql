-- A single node's crash recovery (no Redis: its presence lives in its
-- memory). At each last-seen flush the node writes which users it has
-- online (online_users, as changes) and when it was last alive
-- (node_alive, one row). After a crash (SIGKILL, power loss) the next
-- start gives each user still listed that time as their last-seen (the
-- later time wins) and empties the list, as a cluster's surviving node
-- gives a dead node's users its last lease. A clean shutdown leaves the
-- list empty. A cluster (Redis) does not use these tables.

-- +goose Up
CREATE TABLE IF NOT EXISTS online_users (
    user_id text NOT NULL PRIMARY KEY
);

CREATE TABLE IF NOT EXISTS node_alive (
    id      integer NOT NULL PRIMARY KEY CHECK (id = 1),
    seen_at bigint  NOT NULL
);

-- +goose Down
DROP TABLE IF EXISTS node_alive;
DROP TABLE IF EXISTS online_users;
