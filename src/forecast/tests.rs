use chrono::TimeZone;

use super::*;

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 2, h, m, s).unwrap()
}

fn state(per_minute: u32, per_day: u32) -> SenderState {
    SenderState {
        now: at(9, 0, 0),
        algorithm: Algorithm::Paced,
        limits: Limits {
            per_minute,
            recipients_per_day: per_day,
            reserved_percent: 0,
        },
        next_free_slot: None,
        cooldown_until: None,
        recipients_last_day: 0,
        backlog: Load::default(),
        warm_up: None,
    }
}

/// A backlog of `messages` with `recipients` in all.
fn load(messages: u64, recipients: u64) -> Load {
    Load {
        messages,
        recipients,
    }
}

fn sends(n: usize, recipients: u32) -> Vec<NewSend> {
    vec![
        NewSend {
            not_before: None,
            by: None,
            recipients,
            priority: Priority::Bulk,
        };
        n
    ]
}

#[test]
fn usable_budget_keeps_the_reserved_share_for_high() {
    let limits = Limits {
        per_minute: 25,
        recipients_per_day: 9_000,
        reserved_percent: 20,
    };
    assert_eq!(usable_budget(limits, Priority::High), limits);
    for p in [Priority::Normal, Priority::Bulk] {
        let usable = usable_budget(limits, p);
        assert_eq!((usable.per_minute, usable.recipients_per_day), (20, 7_200));
    }
    let off = Limits {
        reserved_percent: 0,
        ..limits
    };
    assert_eq!(usable_budget(off, Priority::Bulk), off);
    let tiny = Limits {
        per_minute: 1,
        ..limits
    };
    assert_eq!(usable_budget(tiny, Priority::Bulk).per_minute, 1);
}

#[test]
fn spacing_is_the_limiters() {
    assert_eq!(spacing(Algorithm::Paced, 25).num_milliseconds(), 2_480);
    assert_eq!(spacing(Algorithm::Paced, 10).num_milliseconds(), 6_200);
    assert_eq!(
        spacing(Algorithm::FixedWindow, 25).num_milliseconds(),
        2_400
    );
}

#[test]
fn n_messages_on_an_idle_mailbox_finish_n_minus_1_slots_from_now() {
    // 100 messages at 25/min: slots 0, 2.48 s, … 99 × 2.48 s = 245.52 s.
    let f = finish(&state(25, 9_000), &sends(100, 1));
    assert_eq!(f.first, Some(at(9, 0, 0)));
    assert_eq!(f.finish, at(9, 0, 0) + Duration::milliseconds(245_520));
    assert_eq!((f.spilled, f.too_large), (0, 0));
    assert!(warnings(&f, state(25, 9_000).limits, None).is_empty());
}

#[test]
fn nothing_to_send_finishes_now() {
    let f = finish(&state(25, 9_000), &[]);
    assert_eq!((f.first, f.finish), (None, at(9, 0, 0)));
}

#[test]
fn bookings_cooldown_and_backlog_come_first() {
    let mut s = state(10, 9_000);
    s.next_free_slot = Some(at(9, 1, 0));
    s.cooldown_until = Some(at(9, 2, 0));
    s.backlog = load(10, 10);
    // Slots from 09:02:00, 6.2 s apart: 10 backlog, then 5 new; the last is slot 14.
    let f = finish(&s, &sends(5, 1));
    assert_eq!(f.first, Some(at(9, 2, 0)));
    assert_eq!(f.finish, at(9, 2, 0) + Duration::milliseconds(14 * 6_200));
}

#[test]
fn lines_whose_slot_is_after_their_own_by_are_counted_and_warned() {
    let s = state(60, 9_000);
    // 60/min paced: slots 1,034 ms apart from 09:00:00; `by` 09:00:05 is met by slots 0 to 4.
    let mut list = sends(8, 1);
    for send in &mut list[..7] {
        send.by = Some(at(9, 0, 5));
    }
    let f = finish(&s, &list);
    assert_eq!(f.missed_by, 2, "slots 5 and 6 (the 8th has no by)");
    let w = crate::forecast::warnings(&f, s.limits, None);
    assert_eq!(w, [Warning::MissesBy { messages: 2 }]);
    assert_eq!(
        w[0].to_string(),
        "2 messages are forecast after their own `by`"
    );
    assert_eq!(
        Warning::MissesBy { messages: 1 }.to_string(),
        "1 message is forecast after its own `by`"
    );
}

#[test]
fn a_later_scheduled_on_moves_the_slot_and_the_pacing_restarts_there() {
    let s = state(60, 9_000);
    let mut list = sends(2, 1);
    list.push(NewSend {
        not_before: Some(at(10, 0, 0)),
        by: None,
        recipients: 1,
        priority: Priority::Normal,
    });
    list.push(NewSend {
        not_before: Some(at(10, 0, 0)),
        by: None,
        recipients: 1,
        priority: Priority::Normal,
    });
    let f = finish(&s, &list);
    // 60/min paced: 1,034 ms apart; the last is one slot after 10:00:00.
    assert_eq!(f.finish, at(10, 0, 0) + Duration::milliseconds(1_034));
}

#[test]
fn a_share_past_the_day_budget_spills_24_hours_after_the_window_filled() {
    let mut s = state(60, 100);
    s.recipients_last_day = 40;
    // 70 messages of 1 recipient: 60 fit (40 + 60 = 100), 10 wait for the window: the 40
    // counted now leave at 09:00 tomorrow, so the 61st goes then, the rest paced after it.
    let f = finish(&s, &sends(70, 1));
    assert_eq!(f.spilled, 10);
    assert_eq!(
        f.finish,
        at(9, 0, 0) + Duration::hours(24) + Duration::milliseconds(9 * 1_034)
    );
    let w = warnings(&f, s.limits, Some(at(12, 0, 0)));
    assert_eq!(
        w,
        [
            Warning::AfterDeadline { by: at(12, 0, 0) },
            Warning::DayBudget {
                spilled: 10,
                recipients_per_day: 100
            }
        ]
    );
    assert_eq!(
        w[1].to_string(),
        "10 messages exceed the mailbox's day budget of 100 recipients and spill into the next day"
    );
}

#[test]
fn the_campaigns_own_sends_leave_the_window_24_hours_after_their_slot() {
    // 30 recipients a day, 3 per message, nothing counted before: 10 messages fit today, the
    // 11th waits for the first one's recipients (slot 0 + 24 h), the 12th for the second's:
    // both spill.
    let s = state(60, 30);
    let f = finish(&s, &sends(12, 3));
    assert_eq!(f.spilled, 2);
    assert_eq!(
        f.finish,
        at(9, 0, 0) + Duration::hours(24) + Duration::milliseconds(1_034)
    );
}

#[test]
fn a_message_larger_than_the_day_budget_is_counted_not_scheduled() {
    let f = finish(&state(60, 10), &sends(2, 11));
    assert_eq!((f.too_large, f.first), (2, None));
    assert_eq!(
        warnings(&f, state(60, 10).limits, None),
        [Warning::TooLarge { messages: 2 }]
    );
}

#[test]
fn backlog_recipients_are_spread_over_its_messages() {
    // 3 backlog messages with 7 recipients (3 + 2 + 2) and a day budget of 10: one new
    // 3-recipient message still fits (7 + 3), a second spills.
    let mut s = state(60, 10);
    s.backlog = load(3, 7);
    let f = finish(&s, &sends(2, 3));
    assert_eq!(f.spilled, 1);
}

#[test]
fn the_tenant_warning_counts_what_is_used_and_what_is_added() {
    assert_eq!(
        tenant_warning("contoso", 10, 5, (20, 0), Priority::Bulk),
        None
    );
    assert_eq!(
        tenant_warning("contoso", 10, 15, (20, 0), Priority::Bulk),
        Some(Warning::TenantBudget {
            tenant: "contoso".into(),
            external: 25,
            external_recipients_per_day: 20
        })
    );
    assert_eq!(
        tenant_warning("contoso", 30, 0, (20, 0), Priority::Bulk),
        None,
        "nothing external added: no warning for this campaign"
    );
}

fn high(n: usize) -> Vec<NewSend> {
    vec![
        NewSend {
            not_before: None,
            by: None,
            recipients: 1,
            priority: Priority::High,
        };
        n
    ]
}

#[test]
fn high_goes_ahead_of_the_bookings_within_its_share() {
    // L = 25, R = 20 %: the others get 20 a minute, `high` S = 5 of every 61 s ahead of them.
    let mut s = state(25, 9_000);
    s.limits.reserved_percent = 20;
    s.next_free_slot = Some(at(9, 40, 0)); // 1,000 bulk booked ahead
    let f = finish(&s, &high(3));
    assert_eq!(
        (f.first, f.finish),
        (Some(at(9, 0, 0)), at(9, 0, 0)),
        "at once"
    );
    // 12: 5 now, 5 a window (61 s) later, 2 two windows later.
    let f = finish(&s, &high(12));
    assert_eq!(f.finish, at(9, 2, 2));
    // Nothing booked ahead: the whole L in a window, the 26th a window later.
    s.next_free_slot = None;
    assert_eq!(finish(&s, &high(25)).finish, at(9, 0, 0));
    assert_eq!(finish(&s, &high(26)).finish, at(9, 1, 1));
}

#[test]
fn high_does_not_move_the_others_and_is_paced_when_the_reserve_is_off() {
    let mut s = state(25, 9_000);
    s.limits.reserved_percent = 20;
    let mut mixed = sends(10, 1);
    mixed.extend(high(2));
    // Bulk at 20 a minute (3.1 s apart): slots 0 … 9 × 3.1 s; the `high` ones at once.
    let f = finish(&s, &mixed);
    assert_eq!(f.finish, at(9, 0, 0) + Duration::milliseconds(9 * 3_100));
    // Reserve off (or `fixed-window`): `high` is one more message in the queue.
    s.limits.reserved_percent = 0;
    let f = finish(&s, &high(3));
    assert_eq!(f.finish, at(9, 0, 0) + Duration::milliseconds(2 * 2_480));
    s.limits.reserved_percent = 20;
    s.algorithm = Algorithm::FixedWindow;
    let f = finish(&s, &high(3));
    assert_eq!(f.finish, at(9, 0, 0) + Duration::milliseconds(2 * 2_400));
}

#[test]
fn a_backlog_past_the_day_budget_ends_on_the_day_its_last_share_fits() {
    // D = 9,000 one-recipient messages a rolling 24 h, 100,000 waiting: day k sends messages
    // 9,000k .. 9,000k + 8,999, each 24 h after the one 9,000 before it.
    let mut s = state(25, 9_000);
    s.backlog = load(100_000, 100_000);
    let spacing = spacing(Algorithm::Paced, 25);
    assert_eq!(
        backlog_end(&s),
        Some(s.now + Duration::days(11) + spacing * 999)
    );
}

#[test]
fn a_backlog_end_is_the_booked_ones_end_without_unbooked_messages_and_none_when_idle() {
    let mut s = state(25, 9_000);
    assert_eq!(backlog_end(&s), None);
    s.next_free_slot = Some(at(10, 30, 0));
    assert_eq!(backlog_end(&s), Some(at(10, 30, 0)));
    // Behind the bookings: 10 more from the next free slot on.
    s.backlog = load(10, 10);
    assert_eq!(
        backlog_end(&s),
        Some(at(10, 30, 0) + spacing(Algorithm::Paced, 25) * 9)
    );
}

#[test]
fn a_sender_in_warm_up_forecasts_its_day_budgets_step_by_step() {
    use crate::domain::{WarmUp, WarmUpStep};
    use std::num::NonZeroU32;
    // 600 a minute, ramp 100 × 2 up to 400, at step 0: 100 today (from 09:00), 200 on the
    // next UTC day, 400 on the one after; 700 one-recipient messages.
    let mut s = state(600, 100);
    s.warm_up = Some(Ramp {
        step: WarmUpStep {
            ramp: WarmUp {
                start_per_day: NonZeroU32::new(100).unwrap(),
                growth: 2.0,
                max_per_day: NonZeroU32::new(400).unwrap(),
            },
            step: 0,
        },
        own_per_day: 9_000,
    });
    let sends = vec![
        NewSend {
            not_before: None,
            recipients: 1,
            priority: Priority::Normal,
            by: None,
        };
        700
    ];
    let f = finish(&s, &sends);
    // Day 1 (from 09:00): 100. Day 2: the budget is 200 from 00:00 while day 1's 100 are
    // still in the window: 100 at 00:00, 100 more as day 1's leave at 09:00. Day 3: 400 from
    // 00:00: 300 at 00:00 (day 2's first 100 leave then), the last 100 as day 2's 09:00 ones
    // leave: 700 sent on day 3, 09:00.
    assert_eq!(
        f.finish.date_naive(),
        (at(9, 0, 0) + Duration::days(2)).date_naive()
    );
    assert_eq!(f.finish.format("%H").to_string(), "09", "{f:?}");
    // Without the ramp's growth (a flat 100 a day) the same 700 take 7 days.
    s.warm_up = None;
    let flat = finish(&s, &sends);
    assert_eq!(
        flat.finish.date_naive(),
        (at(9, 0, 0) + Duration::days(6)).date_naive()
    );
}
