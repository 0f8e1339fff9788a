// A controller with a test between it and its host: what the controller reports at a
// moment the test chooses (just before it takes a command, just after it answered
// one), and commands the test answers itself.

import BLETesting
import HCI
import NIOCore
import Synchronization

/// Wraps a controller. Each packet the host sends is shown to the hook the test set
/// (`intercept`), which may put events before it on the way back, answer it instead of
/// the controller, or put events after the controller's answer. It records the
/// commands it passes on.
final class Interposer: HCITransport {
    /// What to do with one packet the host sends.
    struct Interception: Sendable {
        /// Events the host gets before the controller takes the packet.
        var before: [HCIEvent] = []
        /// Whether the controller gets the packet (else `before` answers it).
        var forward = true
        /// Events the host gets after the controller's answer to the packet.
        var after: [HCIEvent] = []
    }
    typealias Hook = @Sendable (HCIPacket) -> Interception?

    let base: any HCITransport
    private struct State {
        var hook: Hook?
        var receive: (@Sendable (TransportInput) -> Void)?
        var loop: (any EventLoop)?
        var commands: [(HCIOpcode, [UInt8])] = []
    }
    private let state = Mutex(State())

    init(_ base: any HCITransport) { self.base = base }

    /// Shows every packet the host sends from now on to `hook` (nil: none).
    func intercept(_ hook: Hook?) { state.withLock { $0.hook = hook } }
    /// The commands passed on to the controller or answered here, in order.
    var commands: [(HCIOpcode, [UInt8])] { state.withLock { $0.commands } }

    /// Delivers `events` to the host as the controller's next.
    func inject(_ events: [HCIEvent]) async throws {
        let (receive, loop) = state.withLock { ($0.receive, $0.loop) }
        guard let receive, let loop else { throw TransportError.closed }
        try await loop.submit { receive(.packets(events.map(\.packet))) }.get()
    }

    /// `inject` from code already on the host's loop: the host has handled `events`
    /// (its layers below the facade) when this returns.
    func injectNow(_ events: [HCIEvent]) { injectNow(packets: events.map(\.packet)) }

    /// `injectNow` with any packets (ACL data among the events), as one read.
    func injectNow(packets: [HCIPacket]) {
        let (receive, loop) = state.withLock { ($0.receive, $0.loop) }
        guard let receive, let loop else { return }
        precondition(loop.inEventLoop)
        receive(.packets(packets))
    }

    var inbound: AsyncThrowingStream<HCIPacket, any Error> { base.inbound }
    var preferredLoop: (any EventLoop)? { base.preferredLoop }
    func close() async { await base.close() }

    func deliver(on loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        state.withLock {
            $0.receive = receive
            $0.loop = loop
        }
        base.deliver(on: loop, receive)
    }

    func send(_ packet: HCIPacket) async throws {
        let hook = state.withLock { s -> Hook? in
            if case let .command(op, p) = packet { s.commands.append((op, p)) }
            return s.hook
        }
        guard let i = hook?(packet) else { return try await base.send(packet) }
        if !i.before.isEmpty { try await inject(i.before) }
        if i.forward { try await base.send(packet) }
        // The controller's answer is on its way to the loop already: these follow it.
        if !i.after.isEmpty { try await inject(i.after) }
    }
}
