//! The subcommands, one file each.

pub mod agents;
mod audit;
mod auth;
mod calibrate;
mod call;
mod cluster;
mod doctor;
mod grants;
mod inspect;
mod install;
mod keygen;
mod lock;
mod memory;
mod new;
pub(crate) mod override_tier;
mod pair;
mod plugin;
mod publish;
mod pull;
mod push;
mod reload;
mod review;
mod revoke;
mod search;
mod secret;
mod select;
mod serve;
mod server;
mod servers;
mod show;
mod sign;
pub mod stats;
mod status;
mod tools;
mod verify;

use anyhow::Result;
use clap::Subcommand;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum Command {
    Serve(serve::Serve),
    Tools(tools::Tools),
    Call(call::Call),
    Inspect(inspect::Inspect),
    Select(select::Select),
    Calibrate(calibrate::Calibrate),
    Doctor(doctor::Doctor),
    Stats(stats::Stats),
    Grants(grants::Grants),
    Memory(memory::Memory),
    Cluster(cluster::Cluster),
    Agents(agents::Agents),
    Audit(audit::Audit),
    Override(override_tier::Override),
    Reload(reload::Reload),
    Pair(pair::Pair),
    Secret(secret::Secret),
    Servers(servers::Servers),
    Server(server::Server),
    Auth(auth::Auth),
    Status(status::Status),
    Plugin(plugin::Plugin),
    Keygen(keygen::Keygen),
    Sign(sign::Sign),
    Verify(verify::Verify),
    Push(push::Push),
    Publish(publish::Publish),
    Search(search::Search),
    Install(install::Install),
    Review(review::ReviewCmd),
    Revoke(revoke::Revoke),
    Pull(pull::Pull),
    Show(show::Show),
    Lock(lock::Lock),
    New(new::New),
}

impl Command {
    pub fn run(self) -> Result<ExitCode> {
        match self {
            Command::Serve(c) => c.run(),
            Command::Tools(c) => c.run(),
            Command::Call(c) => c.run(),
            Command::Inspect(c) => c.run(),
            Command::Select(c) => c.run(),
            Command::Calibrate(c) => c.run(),
            Command::Doctor(c) => c.run(),
            Command::Stats(c) => c.run(),
            Command::Grants(c) => c.run(),
            Command::Memory(c) => c.run(),
            Command::Cluster(c) => c.run(),
            Command::Agents(c) => c.run(),
            Command::Audit(c) => c.run(),
            Command::Override(c) => c.run(),
            Command::Reload(c) => c.run(),
            Command::Pair(c) => c.run(),
            Command::Secret(c) => c.run(),
            Command::Servers(c) => c.run(),
            Command::Server(c) => c.run(),
            Command::Auth(c) => c.run(),
            Command::Status(c) => c.run(),
            Command::Plugin(c) => c.run(),
            Command::Keygen(c) => c.run(),
            Command::Sign(c) => c.run(),
            Command::Verify(c) => c.run(),
            Command::Push(c) => c.run(),
            Command::Publish(c) => c.run(),
            Command::Search(c) => c.run(),
            Command::Install(c) => c.run(),
            Command::Review(c) => c.run(),
            Command::Revoke(c) => c.run(),
            Command::Pull(c) => c.run(),
            Command::Show(c) => c.run(),
            Command::Lock(c) => c.run(),
            Command::New(c) => c.run(),
        }
    }
}
