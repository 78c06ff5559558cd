//! PostgreSQL and Redis: where the daemon keeps its rows, its limiter and its intake queue.

use std::num::NonZeroU32;

use url::Url;

use super::Fallback::{SameAs, Value};
use super::Setting;
use super::kinds::Positive;
use super::urls::{Redis, ServerUrl};
use crate::rate_limit::RedisUrls;

settings! {
    /// PostgreSQL and Redis.
    pub struct StorageSettings = "PostgreSQL and Redis" {
        database_url: Url = ServerUrl(&["postgres", "postgresql"]), Setting {
            name: "DATABASE_URL",
            flag: "database-url",
            default: Value("postgres://postgres@127.0.0.1:5432/mail_worker"),
            secret: true,
            help: "PostgreSQL (created only by `mail-worker migrate`; every other command on a missing or unmigrated database says to run it)",
            doc: "PostgreSQL holding tenants, system_mailboxes and messages. `mail-worker migrate` creates the\n\
                  database if missing.",
            ..Setting::NEW
        };
        database_max_connections: NonZeroU32 = Positive, Setting {
            name: "DATABASE_MAX_CONNECTIONS",
            flag: "database-max-connections",
            default: Value("10"),
            help: "PostgreSQL connections per process, whatever WORKER_CONCURRENCY is (a send holds one only per statement, never across a provider call); replicas × this must fit the server's max_connections",
            doc: "The most PostgreSQL connections one process opens, whatever WORKER_CONCURRENCY is (a send\n\
                  holds a connection only per statement, never across a provider call). Replicas × this must\n\
                  stay under the server's max_connections.",
            ..Setting::NEW
        };
        redis_url: RedisUrls = Redis, Setting {
            name: "REDIS_URL",
            flag: "redis-url",
            default: Value("redis://127.0.0.1:6379"),
            secret: true,
            help: "the limiter's Redis unless MAIL_RATE_LIMIT_REDIS_URL is set and the intake queue (INTAKE_QUEUE; PostgreSQL stays the scheduler); one URL or comma-separated cluster seeds; `rediss://` for TLS",
            doc: "Redis for the limiter and the intake queue of campaign sends (INTAKE_QUEUE below).\n\
                  PostgreSQL stays the scheduler: the queue only feeds it.\n\
                  `rediss://` connects over TLS (rustls, verified against the system's trust store).",
            ..Setting::NEW
        };
        rate_limit_redis_url: RedisUrls = Redis, Setting {
            name: "MAIL_RATE_LIMIT_REDIS_URL",
            flag: "rate-limit-redis-url",
            default: SameAs("REDIS_URL"),
            secret: true,
            help: "the limiter's own Redis: one URL (standalone, or any cluster node: detected from MOVED) or comma-separated Redis Cluster seeds (docs/rate-limiting.md)",
            doc: "The limiter's own Redis, if separate. Unset = REDIS_URL. One URL: a standalone Redis, or any\n\
                  node of a Redis Cluster (detected from its first MOVED answer). Several, comma-separated\n\
                  (same scheme and credentials): seed nodes of a Redis Cluster, so a replica starting while one\n\
                  of them is down still finds the cluster. On a cluster the limiter follows failovers and\n\
                  redials from every seed and every node the cluster names. REDIS_URL takes a list the same way\n\
                  (the intake queue then runs on the cluster too; give it several seeds: one URL is one node).",
            example: Some("redis://redis-0:6379,redis://redis-1:6379,redis://redis-2:6379"),
            ..Setting::NEW
        };
    }
}
