//! Stable log event names: the `event` field of every JSON log line. Dashboards and alerts key
//! on these strings, so they never change once released, and all of them are public.
//!
//! Not to be confused with the outbox's events (the webhooks the campaign system receives:
//! `crate::domain::EventKind`, written by `crate::store::events`, delivered by [`crate::outbox`]).

/// A message was accepted by the provider (`202`). Fields: `message.id`, `mailbox`, `recipients`, `duration_ms`.
pub const MAIL_SENT: &str = "mail.sent";
/// Our limiter denied a send; the message was rescheduled. Fields: `message.id`, `mailbox`,
/// `reason` (`minute`|`day`), `retry_after_ms`, `spread_ms`, `scheduled_on`.
pub const MAIL_RATE_LIMIT_DEFERRED: &str = "mail.rateLimit.deferred";
/// The limiter's Redis failed or timed out; the send went ahead unlimited (fail-open). Warn.
pub const MAIL_RATE_LIMIT_REDIS_ERROR: &str = "mail.rateLimit.redisError";
/// At start-up the limiter's Redis did not answer a `PING`: sends fail open (bounded, paced
/// locally) until it does, and `/readyz` says degraded. Error, once per start.
pub const MAIL_RATE_LIMIT_UNREACHABLE_AT_START: &str = "mail.rateLimit.unreachableAtStart";
/// The number of live replicas (heartbeat rows beaten within 15 s) changed: fail-open shares
/// each mailbox's budgets among them. Fields: `live`, `before` (0: not counted yet). Info.
pub const MAIL_REPLICAS_CHANGED: &str = "mail.replicas.changed";
/// The limiter's script failed for a reason that is not connectivity (a bug). Error.
pub const MAIL_RATE_LIMIT_SCRIPT_ERROR: &str = "mail.rateLimit.scriptError";
/// A reservation was given back because the inner send failed.
pub const MAIL_RATE_LIMIT_RELEASED: &str = "mail.rateLimit.released";
/// A mailbox has used `MAIL_BUDGET_ALERT_PERCENT` of its 24 h recipient budget (warn; once per
/// mailbox and 24 h across replicas). Fields: `mailbox`, `used_percent`, `threshold_percent`.
pub const MAIL_BUDGET_NEARLY_USED: &str = "mail.budget.nearlyUsed";
/// A mailbox's `paced` budgets were rebuilt from PostgreSQL's send history (info).
pub const MAIL_RATE_LIMIT_SEEDED: &str = "mail.rateLimit.seeded";
/// The limiter's Redis answered `MOVED`: it is a cluster node, and the limiter now follows the
/// cluster (info, once).
pub const MAIL_RATE_LIMIT_CLUSTER: &str = "mail.rateLimit.cluster";
/// A provider's `Retry-After` now holds every message of a mailbox, on every replica (info).
pub const MAIL_RATE_LIMIT_COOLDOWN: &str = "mail.rateLimit.cooldown";
/// Sends made while failing open were added to a mailbox's shared windows once Redis answered
/// again, or leases left by aborted sends were released at shutdown (info).
pub const MAIL_RATE_LIMIT_RECONCILED: &str = "mail.rateLimit.reconciled";
/// The provider answered 429/503/504; the message was rescheduled.
pub const MAIL_GRAPH_THROTTLED: &str = "mail.graph.throttled";
/// An earlier send's outcome is not confirmed yet (Graph eventually consistent): checked again
/// later, nothing resent (info).
pub const MAIL_SEND_UNCONFIRMED: &str = "mail.send.unconfirmed";
/// An attempt's write found its row taken over by a newer claim (lease recovery handed it on):
/// nothing was written; what the attempt did at Graph is found by the live attempt's check
/// before it sends. Warn. Fields: `message.id`, `outcome`, `claim_token` (this attempt's),
/// `current_token` and `current_status` (the row's now).
pub const MAIL_SEND_STALE_OUTCOME: &str = "mail.send.staleOutcome";
/// A send or the give-back of an unstarted row failed on infrastructure trouble (PostgreSQL):
/// the row stays `SENDING` until lease recovery reschedules it. Error (warn for a give-back).
/// Fields: `message.id`, `error`.
pub const MAIL_SEND_INFRASTRUCTURE_ERROR: &str = "mail.send.infrastructureError";
/// Renewing an attempt's row lease failed (PostgreSQL unreachable); retried every second until
/// the attempt's lease deadline. Warn. Fields: `message.id`, `error`.
pub const MAIL_SEND_LEASE_RENEWAL_FAILED: &str = "mail.send.leaseRenewalFailed";
/// An attempt was stopped at its lease deadline (`SEND_LEASE` − a margin without a
/// confirmed renewal): its requests were cancelled and the row rescheduled as possibly sent.
/// Warn. Fields: `message.id`, `send_attempted`.
pub const MAIL_SEND_LEASE_DEADLINE: &str = "mail.send.leaseDeadline";
/// PostgreSQL was unreachable for an outcome write; retried with backoff until the send lease
/// (warn).
pub const MAIL_OUTCOME_WRITE_RETRY: &str = "mail.outcome.writeRetry";
/// The Graph token endpoint failed transiently; no token request until the pause ends (warn).
pub const GRAPH_TOKEN_UNAVAILABLE: &str = "graph.token.unavailable";
/// A transient failure (5xx, timeout, connection); the message was rescheduled with backoff.
pub const MAIL_RETRY_SCHEDULED: &str = "mail.retry.scheduled";
/// The message ended in `ERROR`; `error` says what a person must do.
pub const MAIL_FAILED: &str = "mail.failed";
/// A sender's credentials are missing or refused: its messages wait (`SCHEDULED`, no attempt
/// counted) instead of failing. Error, once per state change. Fields: `mailbox`, `reason`
/// (the `env:`/`file:` reference or the AADSTS code), `next_probe`.
pub const MAIL_SENDER_PAUSED: &str = "mail.sender.paused";
/// A paused sender works again (its configuration changed, or a probe got past the
/// credentials). Info. Fields: `mailbox`, `was`, `why`, `messages_due`.
pub const MAIL_SENDER_RESUMED: &str = "mail.sender.resumed";
/// A pooled message was given to its pool's overflow sender (its members' day budgets are
/// spent). Info. Fields: `message.id`, `pool`, `reason` (`budgetsSpent`), `mailbox` (the
/// overflow sender). The members' own alerts (pauses, budgets) keep firing.
pub const MAIL_POOL_OVERFLOWED: &str = "mail.pool.overflowed";
/// A `SENDING` row outlived its lease; it is rescheduled, and its next attempt checks Graph
/// before it resends (docs/delivery.md).
pub const MAIL_SEND_OUTCOME_UNKNOWN: &str = "mail.send.outcomeUnknown";
/// The scheduler claimed due messages for this replica's free slots (debug), or a claim
/// failed (warn). Fields: `claimed`, `room`, or `error`.
pub const SCHEDULER_CLAIMED: &str = "scheduler.claimed";
/// A Graph access token was fetched. Fields: `graph.tenant_id`, `client_id`, `expires_in_s`.
pub const GRAPH_TOKEN_FETCHED: &str = "graph.token.fetched";
/// The token endpoint refused the app's credentials.
pub const GRAPH_TOKEN_REFUSED: &str = "graph.token.refused";
/// The daemon started. Fields: `version` ([`crate::VERSION`]), `concurrency`, `metrics_listen`
/// (the address bound, or `off`), `config_digest` ([`crate::config::Config::digest`]).
pub const DAEMON_STARTED: &str = "daemon.started";
/// Shutdown was requested; in-flight sends are finishing. Once per shutdown. Fields:
/// `in_flight`.
pub const DAEMON_STOPPING: &str = "daemon.stopping";
/// A stop signal arrived (`run`, `admin`). Fields: `signal` (`SIGTERM` or `SIGINT`).
pub const DAEMON_SIGNAL: &str = "daemon.signal";
/// The daemon stopped. Fields: `reason`.
pub const DAEMON_STOPPED: &str = "daemon.stopped";
/// A part of the daemon (`claim`, `intake`, `heartbeat`, …) returned before it was asked to
/// stop, failed or panicked: the process stops and exits 1 (error). Fields: `part`, `error`.
pub const DAEMON_PART_FAILED: &str = "daemon.partFailed";
/// A setting that starts but is probably wrong (a default limit above Exchange Online's), at
/// start-up; `check-config` prints the same lines.
pub const CONFIG_WARNING: &str = "config.warning";
/// `run` imported `SENDERS_FILE` at start-up. Info. Fields: `file`, `tenants`,
/// `system_mailboxes`, `limits_changed`, `bookings_dropped`, `messages_due`.
pub const SENDERS_IMPORTED: &str = "senders.imported";
/// Migrations were applied.
pub const DB_MIGRATED: &str = "db.migrated";
/// `mail-worker admin` is serving the admin UI. Info. Fields: `listen`, `cookie_secure`.
pub const MAIL_ADMIN_STARTED: &str = "mail.admin.started";
/// An operator logged in to the admin UI. Info. Fields: `client`.
pub const MAIL_ADMIN_LOGIN: &str = "mail.admin.login";
/// A login to the admin UI was refused: a wrong token, or too many failures from that client
/// (`throttled`). Warn. Fields: `client`, `failures`, `throttled`.
pub const MAIL_ADMIN_LOGIN_FAILED: &str = "mail.admin.loginFailed";
/// An operator changed a system mailbox's rate-limit overrides in the admin UI. Info. Fields:
/// `mailbox`, `per_minute_before`, `per_minute_after`, `recipients_per_day_before`,
/// `recipients_per_day_after` (`default` where no override is set).
pub const MAIL_ADMIN_LIMITS_CHANGED: &str = "mail.admin.limitsChanged";
/// An operator retried messages in the admin UI (`messages retry`). Info. Fields:
/// `message.ids` (the selection, up to 50), `selected`,
/// `matched`, `changed`, `before` (matched rows by status), `after` (`SCHEDULED`).
pub const MAIL_ADMIN_MESSAGES_RETRIED: &str = "mail.admin.messagesRetried";
/// An operator cancelled messages in the admin UI (`messages cancel`). Info. Fields:
/// `message.ids` (the selection, up to 50), `selected`, `matched`, `changed`, `before` (matched rows by status), `after` (`ERROR`).
pub const MAIL_ADMIN_MESSAGES_CANCELLED: &str = "mail.admin.messagesCancelled";
/// An operator retried messages with `mail-worker messages retry` (not a dry run). Info.
/// Fields: `matched`, `changed`, `sender` (masked: `n***@adatum.example`; a tenant name as
/// given), `status`, `error_like` (addresses masked), `ids` (how many `--id`s), `all` (none
/// of `--sender`, `--id`, `--error-like` narrowed it).
pub const MAIL_CLI_MESSAGES_RETRIED: &str = "mail.cli.messagesRetried";
/// An operator cancelled messages with `mail-worker messages cancel` (not a dry run). Info.
/// Fields as [`MAIL_CLI_MESSAGES_RETRIED`].
pub const MAIL_CLI_MESSAGES_CANCELLED: &str = "mail.cli.messagesCancelled";
/// An operator put dead-lettered intake jobs back on the queue in the admin UI (`queue
/// retry`). Info. Fields: `queue`, `tasks` (the selection, up to 50, or `all`), `changed`.
pub const MAIL_ADMIN_QUEUE_RETRIED: &str = "mail.admin.queueRetried";
/// An operator discarded dead-lettered intake jobs in the admin UI (`queue discard`). Info.
/// Fields: `queue`, `tasks` (the selection, up to 50, or `all`), `changed`.
pub const MAIL_ADMIN_QUEUE_DISCARDED: &str = "mail.admin.queueDiscarded";
/// A retention round deleted finished messages older than `MAIL_RETENTION` (info; only for a
/// round that deleted some). Fields: `messages`, `attachments`, `batches`, `duration_ms`.
pub const MESSAGES_PURGED: &str = "mail.retention.purged";
/// A retention round failed; the next one tries again (warn). Fields: `error`.
pub const MESSAGES_PURGE_FAILED: &str = "mail.retention.failed";
/// Recipients were dropped as on their sender's suppression list. Info, once per intake batch
/// or send that dropped some (never the addresses). Fields: `stage` (`intake`, `send`),
/// `recipients`, `messages_failed` (left with none: `ERROR` "all recipients suppressed"), and
/// at `send` `message.id`.
pub const RECIPIENTS_SUPPRESSED: &str = "mail.recipients.suppressed";
/// An operator added an address to a suppression list in the admin UI. Info. Fields: `scope`,
/// `address` (masked), `added` (false: it was listed already).
pub const MAIL_ADMIN_SUPPRESSION_ADDED: &str = "mail.admin.suppressionAdded";
/// An operator removed an address from a suppression list in the admin UI. Info. Fields:
/// `scope`, `address` (masked), `removed` (false: it was not listed).
pub const MAIL_ADMIN_SUPPRESSION_REMOVED: &str = "mail.admin.suppressionRemoved";
/// A non-delivery report in a Graph mailbox's Inbox turned a `SENT` message `BOUNCED` (info).
/// Fields: `message.id`, `mailbox`, `code` (the DSN code, `5.1.1`), `recipients` (how many the
/// NDR names). No address.
pub const MAIL_BOUNCE_RECORDED: &str = "mail.bounce.recorded";
/// An NDR `5.7.233` (the Graph tenant is over Exchange's tenant external recipient rate limit:
/// its external mail waits until its rolling 24 h window frees) or `5.7.705` / `5.7.708` /
/// `5.7.501` (the tenant or its new IPs blocked: its external mail waits 24 h) (warn). Fields:
/// `tenant`, `code`, `until` (when the first external recipient fits again), `limiter` (false:
/// the limiter's Redis did not take it now — `fixed-window`, or a Redis failure; PostgreSQL
/// keeps it), `message.id`, `reason` (the NDR's text, scrubbed). Without a tenant budget
/// configured the mailbox pauses instead: [`MAIL_BOUNCE_MAILBOX_PAUSED`].
pub const MAIL_BOUNCE_TENANT_PAUSED: &str = "mail.bounce.tenantPaused";
/// An NDR `5.1.90` or `5.2.2` submission quota (the sending mailbox's recipients per rolling
/// 24 h are used up: it waits until its window frees), or a tenant block (`5.7.233`, `5.7.705`,
/// `5.7.708`, `5.7.501`) for a tenant with no external budget configured (the mailbox waits
/// 24 h) (warn). Fields: `mailbox`, `code`, `until`, `limiter`, `message.id`, `reason`, as
/// [`MAIL_BOUNCE_TENANT_PAUSED`].
pub const MAIL_BOUNCE_MAILBOX_PAUSED: &str = "mail.bounce.mailboxPaused";
/// One mailbox's Inbox was read for bounces (debug; info when it found any). Fields: `mailbox`,
/// `requests` (Graph requests the read made), `reports` (NDRs listed), `bounced`, `left` (NDRs
/// left for a later read: not sent yet, or not ours).
pub const MAIL_BOUNCE_READ: &str = "mail.bounce.read";
/// Reading a mailbox's Inbox for bounces failed; the next interval tries again (warn). Fields:
/// `mailbox`, `error`.
pub const MAIL_BOUNCE_READ_FAILED: &str = "mail.bounce.readFailed";
/// An intake job is not a message (the file import's reason for the line): dead-lettered.
/// Fields: `task` (the job's id), `reason`. Warn, once per job.
pub const INTAKE_JOB_DEAD: &str = "intake.job.dead";
/// Storing a batch of intake jobs in PostgreSQL failed: the jobs wait (not acked). Fields:
/// `error`. Warn, once per batch.
pub const INTAKE_STORE_FAILED: &str = "intake.store.failed";
/// The intake consumer started or stopped. Fields: `queue`, `worker`. Info.
pub const INTAKE_CONSUMER: &str = "intake.consumer";
/// The intake queue's Redis failed outside a job (fetch, heartbeat, cleanup). Fields: `error`.
pub const INTAKE_REDIS_ERROR: &str = "intake.redisError";
/// The intake consumer stopped polling (a poll error: its Redis restarted or froze; or silent
/// while its Redis answered) and starts again under a new name after a backoff. Fields:
/// `error`, `worker`, `restarts` (since start-up), `wait_ms`. Warn.
pub const INTAKE_CONSUMER_RESTART: &str = "intake.consumerRestart";
/// An HTTP ingest request was answered (`POST /v1/messages`), once per request whatever its
/// status. Fields: `producer` (the token's name; empty for a 401), `status`, `took_ms`, and
/// `lines`, `stored`, `duplicate`, `refused` once its lines were judged, else `refusal` (why it
/// was refused before: `crate::ingest`'s `Refusal`), `replayed` (an `Idempotency-Key` repeat
/// answered from PostgreSQL); once at start-up with `addr` and `producers` (the listener
/// listens). Info.
pub const INGEST_REQUEST: &str = "ingest.request";
/// An ingest line is not a message (the file import's reason) or names a sender its token may
/// not post for. Fields: `producer`, `line`, `reason`. Warn, once per line.
pub const INGEST_LINE_REFUSED: &str = "ingest.line.refused";
/// An ingest request without a known bearer token (401; the token is never logged). Warn.
pub const INGEST_UNAUTHORIZED: &str = "ingest.unauthorized";
/// An ingest request could not be stored: PostgreSQL failed or did not answer within the
/// deadline; answered 503 with `Retry-After`, nothing stored. Fields: `producer`, `error`. Warn.
pub const INGEST_STORE_FAILED: &str = "ingest.store.failed";
/// A batch of outbox events was POSTed to a webhook receiver and accepted (debug). Fields:
/// `receiver` (URL, query and password hidden), `events`, `duration_ms`.
pub const EVENTS_DELIVERED: &str = "events.delivered";
/// A webhook receiver refused or did not answer a batch; it is tried again after a jittered
/// backoff (warn). Fields: `receiver`, `events`, `failures`, `retry_in_ms`, `error`.
pub const EVENTS_DELIVERY_FAILED: &str = "events.deliveryFailed";
/// Events older than `EVENTS_RETRY_FOR` were given up at a failing receiver (error). Fields:
/// `receiver`, `events`, `reason`; `mail-worker events dead` lists them, `replay` resends.
pub const EVENTS_DEAD: &str = "events.dead";
/// This replica delivers the outbox to a receiver (info, at start). Fields: `receiver`.
pub const EVENTS_DISPATCHER: &str = "events.dispatcher";
/// The outbox's PostgreSQL queries failed; the dispatcher tries again (warn). Fields:
/// `receiver`, `error`.
pub const EVENTS_STORE_ERROR: &str = "events.storeError";

/// A tenant's message trace was read (`crate::delivery`): requests, records, outcomes.
pub const MAIL_TRACE_READ: &str = "mail.trace.read";
/// Reading a tenant's message trace failed; the next interval tries again.
pub const MAIL_TRACE_READ_FAILED: &str = "mail.trace.readFailed";
/// A tenant's trace reads are paused: `401` (the message-trace app's service principal is
/// missing) or `403` (`ExchangeMessageTrace.Read.All` missing); the reason names the fix.
pub const MAIL_TRACE_PAUSED: &str = "mail.trace.paused";

/// A sender's warm-up ramp counted a clean sending day and stepped up one step (info; ADR
/// 0047). Fields: `mailbox`, `day` (the sending day counted), `step`, `day_budget`,
/// `sending_days`, `sent`.
pub const MAIL_WARMUP_STEPPED: &str = "mail.warmup.stepped";
/// A sender's warm-up ramp held its step: the sending day counted was not clean, or the ramp
/// is at its end (`reason` says which; warn when not clean). Fields: `mailbox`, `day`, `step`,
/// `day_budget`, `sending_days`, `reason`.
pub const MAIL_WARMUP_HELD: &str = "mail.warmup.held";
/// A reputation NDR (5.7.705, 5.7.708, 5.7.501, 5.7.515) stepped a sender's warm-up ramp down
/// one step (warn). Fields: `mailbox`, `day`, `step`, `day_budget`, `sending_days`, `reason`.
pub const MAIL_WARMUP_STEPPED_DOWN: &str = "mail.warmup.steppedDown";
/// Evaluating the warm-up ramps failed (PostgreSQL); the next round tries again (warn).
/// Fields: `error`.
pub const MAIL_WARMUP_EVALUATION_FAILED: &str = "mail.warmup.evaluationFailed";
/// An adaptive rule fired (warn; docs/adaptive-rules.md): its signal reached the rule's
/// threshold within its window. Fields: `rule`, `signal`, `scope` (`mailbox`, `tenant`),
/// `mailbox`, `tenant`, `count`, `action` (`shrink`, `suspend`), `factor` (of the budget left
/// while it holds; 0 for a suspension), `until` (when its recovery starts).
pub const MAIL_ADAPTIVE_FIRED: &str = "mail.adaptive.fired";
/// An adaptive action ended: the whole budget is back (info; logged once by each replica that
/// saw it in force). Fields: `rule`, `scope`.
pub const MAIL_ADAPTIVE_RECOVERED: &str = "mail.adaptive.recovered";
/// An operator suspended a mailbox, a tenant's external mail or a campaign (`mail-worker
/// suspend`; info). Fields: `scope`, `key`, `until`, `reason`.
pub const MAIL_ADAPTIVE_SUSPENDED: &str = "mail.adaptive.suspended";
/// An operator lifted what held a mailbox, tenant or campaign (`mail-worker resume`; info).
/// Fields: `scope`, `key`.
pub const MAIL_ADAPTIVE_RESUMED: &str = "mail.adaptive.resumed";
