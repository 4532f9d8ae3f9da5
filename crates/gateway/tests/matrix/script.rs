//! The conversation each position plays, and where the cause strikes.
//!
//! Every cell starts on account `p1` (fill first). Before the cause strikes, the usage is
//! *primed* on the request before the switch: to 87 % for the causes that find a model-written
//! handoff (quota 429, fall-through, direct route: the relay writes one in the 85–95 % band),
//! to 97 % for the usage jump (past the band: nothing is written, the account is exhausted).
//! Then the cause is *armed* and the next request meets it. After the switch, each
//! conversation finishes its tool loop and plays one more turn on the new account.

use context_relay_sim::SimFault;

use super::setup::PRIMARY;
use super::{Cause, Cell, Position};
use context_relay_testkit::agents::{Agent, Step};
use context_relay_testkit::clients::compact_body;
use context_relay_testkit::harness::Harness;

/// One conversation of a cell: its agent, its name in the evidence, its task marker.
pub struct Conv {
    pub agent: Agent,
    pub name: &'static str,
    pub task: String,
}

/// A cell being played.
pub struct Run<'a> {
    pub h: &'a Harness,
    pub cell: Cell,
    /// Tool calls per ask.
    pub calls: usize,
    /// Client requests sent so far.
    pub sent: usize,
    /// The number of upstream requests recorded when the cause was armed.
    pub armed_at: usize,
}

impl<'a> Run<'a> {
    pub fn new(h: &'a Harness, cell: Cell, calls: usize) -> Self {
        Self {
            h,
            cell,
            calls,
            sent: 0,
            armed_at: 0,
        }
    }

    /// Sets the usage of `p1` so that the next request's reading is the one the cause needs.
    fn prime(&self) {
        let sim = &self.h.sim;
        if self.cell.cause.primes_band() {
            sim.set_used(PRIMARY[0], 82.0);
        } else if self.cell.cause == Cause::UsageJump {
            sim.set_used(PRIMARY[0], 92.0);
        }
    }

    /// Makes the next request to `p1` meet the cause.
    fn arm(&mut self) {
        let sim = &self.h.sim;
        let first = PRIMARY[0];
        match self.cell.cause {
            Cause::Quota429 | Cause::DirectRoute | Cause::NoQuotaHeaders => {
                sim.set_used(first, 100.0)
            }
            Cause::FallThrough => PRIMARY.iter().for_each(|a| sim.set_used(a, 100.0)),
            Cause::UsageJump => {}
            Cause::Overloaded => sim.fail_next(Some(first), SimFault::Overloaded),
            Cause::ConnectionError => sim.fail_next(Some(first), SimFault::Disconnect),
            Cause::Refused401 => sim.revoke(first),
        }
        self.armed_at = sim.requests().len();
    }

    /// Sends one request of `conv`; the step its complete reply made.
    pub async fn step(&mut self, conv: &mut Conv) -> Result<Step, String> {
        let (status, reply) = conv.agent.send(self.h, 0).await;
        self.sent += 1;
        self.h.idle().await;
        let text = || {
            let s = String::from_utf8_lossy(&reply);
            s.chars().take(300).collect::<String>()
        };
        if status != 200 {
            return Err(format!(
                "{}'s client request {} got {status}: {}",
                conv.name,
                self.sent,
                text()
            ));
        }
        conv.agent.absorb(&reply).ok_or_else(|| {
            format!(
                "{}'s client request {} got a reply that did not complete: {}",
                conv.name,
                self.sent,
                text()
            )
        })
    }

    /// Requests until the turn's answer; the usage is primed before request `prime_before`
    /// (counted from 0).
    async fn turn(&mut self, conv: &mut Conv, prime_before: Option<usize>) -> Result<(), String> {
        for i in 0..=self.calls + 1 {
            if prime_before == Some(i) {
                self.prime();
            }
            if self.step(conv).await? == Step::Answered {
                return Ok(());
            }
        }
        Err(format!("{}'s tool loop did not end", conv.name))
    }

    async fn ask(&mut self, conv: &mut Conv, prime_before: Option<usize>) -> Result<(), String> {
        conv.agent.ask(&format!(
            "Next step of {}: go on, request {}.",
            conv.task, self.sent
        ));
        self.turn(conv, prime_before).await
    }

    /// Codex's remote compaction on the session's account.
    async fn compact(&mut self, conv: &mut Conv) -> Result<(), String> {
        let body = compact_body(&conv.agent.body);
        let (status, _, reply) = self
            .h
            .send(0, "/v1/responses/compact", &conv.agent.headers, &body)
            .await;
        self.sent += 1;
        self.h.idle().await;
        if status != 200 || !conv.agent.compacted(&reply) {
            let s = String::from_utf8_lossy(&reply);
            return Err(format!(
                "the compaction request got {status}: {}",
                s.chars().take(300).collect::<String>()
            ));
        }
        Ok(())
    }

    /// Plays the cell's position with `parent` (and `sub` for the sub-agent position);
    /// `fact` is carried by the tool outputs of the first turn only.
    pub async fn play(
        &mut self,
        parent: &mut Conv,
        sub: Option<&mut Conv>,
        fact: &str,
    ) -> Result<(), String> {
        let last = Some(self.calls);
        match self.cell.position {
            Position::SessionStart => {
                if self.cell.cause == Cause::UsageJump {
                    self.prime();
                    self.armed_at = self.h.sim.requests().len();
                } else {
                    self.arm();
                }
                self.turn(parent, None).await?;
                self.ask(parent, None).await
            }
            Position::TurnStart => {
                self.turn(parent, last).await?;
                parent.agent.ask(&format!("Next step of {}.", parent.task));
                self.arm();
                self.turn(parent, None).await?;
                self.ask(parent, None).await
            }
            Position::MidToolLoop => {
                self.turn(parent, None).await?;
                parent.agent.ask(&format!("Next step of {}.", parent.task));
                self.prime();
                self.expect_call(parent).await?;
                self.arm();
                self.turn(parent, None).await?;
                self.ask(parent, None).await
            }
            Position::AfterCompaction => {
                parent.agent.note = fact.to_owned();
                self.turn(parent, None).await?;
                parent.agent.note = "second turn".to_owned();
                self.compact(parent).await?;
                self.ask(parent, last).await?;
                parent.agent.ask(&format!("Next step of {}.", parent.task));
                self.arm();
                self.turn(parent, None).await?;
                self.ask(parent, None).await
            }
            Position::SubAgent => {
                let sub = sub.ok_or("the sub-agent position needs a second conversation")?;
                self.turn(parent, None).await?;
                // The parent's next answer starts the sub-agent (a call it waits on).
                parent
                    .agent
                    .ask(&format!("Delegate the next step of {}.", parent.task));
                if self.cell.cause.primes_band() {
                    self.prime();
                }
                self.expect_call(parent).await?;
                if self.cell.cause == Cause::UsageJump {
                    self.prime();
                }
                self.expect_call(sub).await?;
                self.arm();
                self.turn(sub, None).await?;
                self.turn(parent, None).await?;
                self.ask(parent, None).await
            }
        }
    }

    async fn expect_call(&mut self, conv: &mut Conv) -> Result<(), String> {
        match self.step(conv).await? {
            Step::Called => Ok(()),
            Step::Answered => Err(format!("{} answered where a tool call was due", conv.name)),
        }
    }
}
