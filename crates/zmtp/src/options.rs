//! Socket options.

use std::time::Duration;

use bytes::Bytes;

use crate::{Error, Limits, MechanismConfig, SocketType};

/// Per-socket options, fixed when the socket is created.
///
/// Start from [`Options::default()`] and change what you need, with the
/// `with_*` builder methods or by assigning the public fields. The struct is
/// `#[non_exhaustive]`: options added later do not break code written this way
/// (a struct literal outside this crate would).
///
/// ```
/// use std::time::Duration;
/// let opts = dafka_zmtp::Options::default()
///     .with_sndhwm(10_000)
///     .with_linger(Some(Duration::from_millis(500)));
/// assert_eq!(opts.rcvhwm, 1000);
///
/// let mut opts = opts;
/// opts.rcvhwm = 50;
/// assert_eq!(opts.rcvhwm, 50);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Send high-water mark, in messages, per peer (libzmq `ZMQ_SNDHWM`).
    /// `0` means unlimited. Default 1000.
    pub sndhwm: usize,
    /// Receive high-water mark, in messages, for the socket's receive queue
    /// (libzmq `ZMQ_RCVHWM`). When it is reached the socket stops reading
    /// from its peers (TCP back-pressure). `0` means unlimited. Default 1000.
    pub rcvhwm: usize,
    /// How long [`Socket::close`](crate::Socket::close) keeps flushing queued
    /// outgoing messages. `None` waits until everything is sent (libzmq's
    /// default of -1); `Some(Duration::ZERO)` discards them at once.
    /// Default `None`.
    pub linger: Option<Duration>,
    /// Send a ZMTP PING this often (libzmq `ZMQ_HEARTBEAT_IVL`). Default off.
    pub heartbeat_ivl: Option<Duration>,
    /// TTL announced in our PINGs: the peer may close the connection if it
    /// hears nothing for this long (`ZMQ_HEARTBEAT_TTL`). Default: none.
    pub heartbeat_ttl: Option<Duration>,
    /// Close the connection when nothing arrives for this long after a PING
    /// (`ZMQ_HEARTBEAT_TIMEOUT`). Default: the heartbeat interval.
    pub heartbeat_timeout: Option<Duration>,
    /// First reconnect delay (`ZMQ_RECONNECT_IVL`); a random jitter of up to
    /// the same amount is added. Default 100 ms.
    pub reconnect_ivl: Duration,
    /// When set, the reconnect delay doubles after every failed attempt up to
    /// this cap (`ZMQ_RECONNECT_IVL_MAX`). Default `None` (no doubling, as in
    /// libzmq).
    pub reconnect_ivl_max: Option<Duration>,
    /// Queue messages only to peers whose handshake is complete
    /// (`ZMQ_IMMEDIATE`). By default a `connect`ed peer gets messages queued
    /// (up to the HWM) before it is reachable, as in libzmq. Default false.
    pub immediate: bool,
    /// Our routing id (`ZMQ_ROUTING_ID`), sent in READY by REQ, DEALER and
    /// ROUTER sockets. At most 255 bytes, must not start with 0x00.
    pub routing_id: Option<Bytes>,
    /// ROUTER: fail with [`Error::HostUnreachable`](crate::Error::HostUnreachable)
    /// for unknown routing ids and block (instead of dropping) when the peer is
    /// at its HWM (`ZMQ_ROUTER_MANDATORY`). Default false.
    pub router_mandatory: bool,
    /// ROUTER: a new peer announcing a routing id already in use takes it
    /// over (`ZMQ_ROUTER_HANDOVER`; zyre sets it) instead of being refused.
    /// Default false.
    pub router_handover: bool,
    /// ROUTER: every received message carries, after its routing id, a second envelope frame
    /// with the peer's authenticated CURVE public key (32 bytes, the key a CURVE server's
    /// authenticator allowed for that connection; empty for NULL, PLAIN and `inproc://`
    /// peers). Like libzmq's `User-Id` message property, but per message, so it always names
    /// the connection the message came on (no race with reconnects or handover). Sending is
    /// unchanged (`[routing id, body...]`). Default false: other ROUTERs pay nothing.
    pub router_peer_key: bool,
    /// XPUB: deliver every subscription message to the application, not only
    /// the first one for each prefix (`ZMQ_XPUB_VERBOSE`). Default false.
    pub xpub_verbose: bool,
    /// XPUB: send this message to every new subscriber as soon as it
    /// connects (`ZMQ_XPUB_WELCOME_MSG`; the Dafka tower uses `"W"`).
    pub xpub_welcome_msg: Option<Bytes>,
    /// Frame and message size limits applied to peers (and checked on send).
    /// The default is bounded (unlike libzmq's unlimited `ZMQ_MAXMSGSIZE`).
    pub limits: Limits,
    /// Limits for what peers send only, when a socket's input is smaller by its role than
    /// what it sends (a publisher hears only subscriptions): a peer announcing a larger frame
    /// is disconnected from the frame's header (logged), and `limits` then bound only what
    /// this socket sends. Like libzmq's `ZMQ_MAXMSGSIZE`, which is inbound only. Commands may
    /// still be 64 KiB (a READY, a SUBSCRIBE). Default `None`: `limits` both ways.
    pub recv_limits: Option<Limits>,
    /// Close a connection whose peer started a unit (the greeting, a command, a message) and
    /// did not complete it within this time: a peer that stops in the middle of a frame does
    /// not hold the bytes it sent for ever (see also [`handshake_timeout`](Self::handshake_timeout)).
    /// Counted only while the connection reads (not while this socket's receive queue holds
    /// its reading back). `None`: no limit (libzmq has none). Default 60 s: a 64 MiB frame
    /// arrives within it above about 10 Mbit/s.
    pub message_timeout: Option<Duration>,
    /// Give up a TCP connect attempt after this long (then retry after the
    /// reconnect interval). Default `None`: the operating system's timeout.
    pub connect_timeout: Option<Duration>,
    /// Close a connection whose ZMTP handshake has not completed in this
    /// time (`ZMQ_HANDSHAKE_IVL`). Default 30 s, as libzmq.
    pub handshake_timeout: Option<Duration>,
    /// Extra READY properties (names should start with `X-`).
    pub properties: Vec<(String, Bytes)>,
    /// PUB/XPUB: most distinct prefixes one peer may subscribe to; a peer
    /// subscribing to more is disconnected (logged). `0` means unlimited
    /// (libzmq has no limit). Default 10 000.
    pub max_subscriptions: usize,
    /// PUB/XPUB: longest subscription (or cancel) prefix accepted from a
    /// peer, in bytes; a peer sending a longer one is disconnected (logged).
    /// `0` means unlimited (libzmq has no limit). Default 4096.
    pub max_subscription_size: usize,
    /// Most connections accepted at once on each bound TCP or IPC endpoint;
    /// at the limit the endpoint stops accepting (further peers wait in the
    /// kernel's backlog) until one of its connections ends. `0` means
    /// unlimited (libzmq has no limit). Default 4096.
    pub max_connections: usize,
    /// Security mechanism and role: NULL (the default), PLAIN or CURVE, client or server
    /// (libzmq's `ZMQ_PLAIN_*`, `ZMQ_CURVE_*` and a ZAP handler in one value). A server's
    /// [`Authenticator`](crate::Authenticator) sees each client's credentials and address.
    pub mechanism: MechanismConfig,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sndhwm: 1000,
            rcvhwm: 1000,
            linger: None,
            heartbeat_ivl: None,
            heartbeat_ttl: None,
            heartbeat_timeout: None,
            reconnect_ivl: Duration::from_millis(100),
            reconnect_ivl_max: None,
            immediate: false,
            routing_id: None,
            router_mandatory: false,
            router_handover: false,
            router_peer_key: false,
            xpub_verbose: false,
            xpub_welcome_msg: None,
            limits: Limits::default(),
            recv_limits: None,
            message_timeout: Some(Duration::from_secs(60)),
            connect_timeout: None,
            handshake_timeout: Some(Duration::from_secs(30)),
            properties: Vec::new(),
            max_subscriptions: 10_000,
            max_subscription_size: 4096,
            max_connections: 4096,
            mechanism: MechanismConfig::Null,
        }
    }
}

impl Options {
    pub(crate) fn effective_sndhwm(&self) -> usize {
        if self.sndhwm == 0 {
            usize::MAX
        } else {
            self.sndhwm
        }
    }

    pub(crate) fn effective_rcvhwm(&self) -> usize {
        if self.rcvhwm == 0 {
            usize::MAX
        } else {
            self.rcvhwm
        }
    }
}

/// Builder methods, one per field, taking the field's type.
macro_rules! setters {
    ($($field:ident / $with:ident: $ty:ty),* $(,)?) => {
        impl Options {
            $(
                #[doc = concat!("Sets [`", stringify!($field), "`](Options::", stringify!($field), ").")]
                #[must_use]
                pub fn $with(mut self, value: $ty) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}

setters! {
    sndhwm / with_sndhwm: usize,
    rcvhwm / with_rcvhwm: usize,
    linger / with_linger: Option<Duration>,
    heartbeat_ivl / with_heartbeat_ivl: Option<Duration>,
    heartbeat_ttl / with_heartbeat_ttl: Option<Duration>,
    heartbeat_timeout / with_heartbeat_timeout: Option<Duration>,
    reconnect_ivl / with_reconnect_ivl: Duration,
    reconnect_ivl_max / with_reconnect_ivl_max: Option<Duration>,
    immediate / with_immediate: bool,
    routing_id / with_routing_id: Option<Bytes>,
    router_mandatory / with_router_mandatory: bool,
    router_handover / with_router_handover: bool,
    router_peer_key / with_router_peer_key: bool,
    xpub_verbose / with_xpub_verbose: bool,
    xpub_welcome_msg / with_xpub_welcome_msg: Option<Bytes>,
    limits / with_limits: Limits,
    recv_limits / with_recv_limits: Option<Limits>,
    message_timeout / with_message_timeout: Option<Duration>,
    connect_timeout / with_connect_timeout: Option<Duration>,
    handshake_timeout / with_handshake_timeout: Option<Duration>,
    properties / with_properties: Vec<(String, Bytes)>,
    max_subscriptions / with_max_subscriptions: usize,
    max_subscription_size / with_max_subscription_size: usize,
    max_connections / with_max_connections: usize,
    mechanism / with_mechanism: MechanismConfig,
}

impl Options {
    /// Add one READY property (the name should start with `X-`).
    #[must_use]
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.properties.push((name.into(), value.into()));
        self
    }

    /// Check the options for a socket of type `socket_type`:
    /// [`Error::InvalidOption`] names the first bad one.
    /// [`Socket::new`](crate::Socket::new) calls this.
    pub fn validate(&self, socket_type: SocketType) -> Result<(), Error> {
        if self
            .routing_id
            .as_ref()
            .is_some_and(|id| id.first() == Some(&0x00))
        {
            // libzmq reserves ids starting with 0x00 for generated ones.
            return Err(Error::InvalidOption(
                "routing_id must not start with 0x00".to_owned(),
            ));
        }
        crate::conn::config_for(socket_type, self)
            .validate()
            .map_err(|e| Error::InvalidOption(e.to_string()))
    }
}
