//! A ZRE node on loopback driven through stdin and reporting on stdout, one line each, for
//! interop tests (`tests/test_zre_pyre.py` runs it beside a pyre node).
//!
//! Usage: `zre_peer PORT NAME GROUP [KEY=VALUE ...]`: beacons to 127.255.255.255:PORT only,
//! joins GROUP, announces the headers. Frames are hex on both sides.
//!
//! stdout: `UUID <hex>` first, then one line per event: `ENTER <uuid> <name> <address>
//! <key=value,...>`, `EXIT <uuid>`, `JOIN <uuid> <group>`, `LEAVE <uuid> <group>`, `SHOUT <uuid>
//! <group> <frame>...`, `WHISPER <uuid> <frame>...`, `EVASIVE <uuid>`, `SILENT <uuid>`, `STOP`.
//! stdin: `SHOUT <group> <frame>...`, `WHISPER <uuid> <frame>...`, `JOIN <group>`,
//! `LEAVE <group>`, `STOP`.

use std::io::Write;

use bytes::Bytes;
use dafka_zre::{Event, Options, ZreNode};
use tokio::io::{AsyncBufReadExt, BufReader};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Bytes> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .map(Bytes::from)
}

fn frames(words: &[&str]) -> Vec<Bytes> {
    words.iter().filter_map(|w| unhex(w)).collect()
}

fn line(e: &Event) -> String {
    let frames = |c: &[Bytes]| c.iter().map(|f| hex(f)).collect::<Vec<_>>().join(" ");
    match e {
        Event::Enter {
            peer,
            name,
            headers,
            address,
        } => {
            let h: Vec<String> = headers.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("ENTER {peer} {name} {address} {}", h.join(","))
        }
        Event::Exit { peer, .. } => format!("EXIT {peer}"),
        Event::Join { peer, group, .. } => format!("JOIN {peer} {group}"),
        Event::Leave { peer, group, .. } => format!("LEAVE {peer} {group}"),
        Event::Shout {
            peer,
            group,
            content,
            ..
        } => format!("SHOUT {peer} {group} {}", frames(content)),
        Event::Whisper { peer, content, .. } => format!("WHISPER {peer} {}", frames(content)),
        Event::Evasive { peer, .. } => format!("EVASIVE {peer}"),
        Event::Silent { peer, .. } => format!("SILENT {peer}"),
        Event::Stop => "STOP".to_owned(),
        other => format!("OTHER {other:?}"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [port, name, group, headers @ ..] = &args[..] else {
        return Err("usage: zre_peer PORT NAME GROUP [KEY=VALUE ...]".into());
    };
    let mut options = Options::loopback(port.parse()?).with_name(name.as_str());
    for h in headers {
        let (k, v) = h.split_once('=').ok_or("header without =")?;
        options = options.with_header(k, v);
    }
    let mut node = ZreNode::start(options).await?;
    node.join(group).await?;
    let mut out = std::io::stdout();
    writeln!(out, "UUID {}", node.uuid())?;
    out.flush()?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            e = node.recv() => {
                let Some(e) = e else { break };
                writeln!(out, "{}", line(&e))?;
                out.flush()?;
                if e == Event::Stop {
                    break;
                }
            }
            l = stdin.next_line() => {
                let l = l?.unwrap_or_else(|| "STOP".to_owned());
                let words: Vec<&str> = l.split_whitespace().collect();
                match words.as_slice() {
                    ["SHOUT", group, rest @ ..] => node.shout(group, frames(rest)).await?,
                    ["WHISPER", peer, rest @ ..] => node.whisper(peer.parse()?, frames(rest)).await?,
                    ["JOIN", group] => node.join(group).await?,
                    ["LEAVE", group] => node.leave(group).await?,
                    ["STOP"] => {
                        node.stop().await;
                        writeln!(out, "STOP")?;
                        out.flush()?;
                        break;
                    }
                    _ => eprintln!("unknown command {l:?}"),
                }
            }
        }
    }
    Ok(())
}
