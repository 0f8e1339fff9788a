// A connect whose time runs out as the controller makes the link. Which came first is
// the controller's order: a link the controller reported before the time ran out is
// the connect's (the host takes it as the event arrives, on the loop the timer fires
// on); one
// it reported after (LE Create Connection Cancel too late, refused with Command
// Disallowed) belongs to nobody, and the host ends it rather than leave a link up that
// no one holds, as Linux and Android do.

@testable import BLE
import BLETesting
import HCI
import Testing

@Suite(.timeLimit(.minutes(3))) struct LateLinkTests {
    static let me = BluetoothAddress("C0:00:00:00:03:01")!
    /// Nobody advertises there: the controller tries until it is told to stop.
    static let nobody = BluetoothAddress("C0:00:00:00:03:09")!
    static let link = HCIEvent.le(.connectionComplete(LEConnectionComplete(connectionHandle: 0x0777, role: .central, peerAddressType: .public,
                                                                         peerAddress: nobody)))

    /// A host on the virtual radio through an `Interposer` that answers a Disconnect of
    /// link 0x0777 itself (the controller below does not know that link).
    func rig() async throws -> (VirtualRadio, Interposer, BluetoothHost) {
        let radio = VirtualRadio()
        let t = Interposer(await radio.makeController(address: Self.me))
        let host = BluetoothHost(transport: t, logger: Bench.logger)
        try await host.start()
        return (radio, t, host)
    }

    static func endsLink0777(_ packet: HCIPacket) -> Interposer.Interception? {
        guard case let .command(op, p) = packet, op == .disconnect, p.prefix(2) == [0x77, 0x07] else { return nil }
        return .init(before: [.commandStatus(CommandStatus(status: .success, commandOpcode: .disconnect)),
                              .disconnectionComplete(DisconnectionComplete(connectionHandle: 0x0777, reason: .connectionTerminatedByLocalHost))],
                     forward: false)
    }

    @Test func aLinkMadeAfterTheConnectGaveUpIsEnded() async throws {
        let (radio, t, host) = try await rig()
        defer { Task { await host.close(); _ = radio } }
        t.intercept { packet in
            guard case let .command(op, _) = packet, op == .leCreateConnectionCancel else { return Self.endsLink0777(packet) }
            // The controller made the link just before it took the cancel, which it
            // refuses: no attempt is under way any more.
            return .init(before: [Self.link, .commandComplete(CommandComplete(commandOpcode: .leCreateConnectionCancel,
                                                                              returnParameters: [HCIStatus.commandDisallowed.rawValue]))],
                         forward: false)
        }
        let events = host.connectionEvents()
        await #expect(throws: BLEError.self) { _ = try await host.central.connect(to: Self.nobody, within: .milliseconds(200)) }
        let ended = await firstElement(events.filter {
            if case .disconnected = $0 { return true } else { return false }
        }, within: .seconds(5))
        guard case let .disconnected(c, reason)? = ended else {
            Issue.record("the link no connect waits for stays up")
            return
        }
        #expect(c.handle == 0x0777 && reason == .connectionTerminatedByLocalHost)
        // Remote User Terminated Connection, as any disconnect of ours.
        #expect(t.commands.contains { $0.0 == .disconnect && $0.1 == [0x77, 0x07, 0x13] }, "\(t.commands.map(\.0))")
        #expect(await host.connections.isEmpty)
    }

    @Test func aLinkReportedBeforeTheTimeRanOutIsTheConnects() async throws {
        let (radio, t, host) = try await rig()
        defer { Task { await host.close(); _ = radio } }
        let (sent, sentContinuation) = AsyncStream<Void>.makeStream()
        t.intercept { packet in
            if case let .command(op, _) = packet, op == .leCreateConnection { sentContinuation.yield() }
            return Self.endsLink0777(packet)
        }
        // (The host's connect: the link, with no MTU exchange over a link the controller
        // below does not know.)
        let connecting = Task {
            try await host.connect(toAnyOf: [DeviceAddress(Self.nobody)], within: .seconds(30), parameters: LEConnectionParameters())
        }
        #expect(await firstElement(sent, within: .seconds(5)) != nil, "LE Create Connection was not sent")
        // In one turn of the loop: the controller reports the link (the L2CAP host has
        // it), and the connect's time runs out right after, before any task has run.
        try await host.loop.submit {
            t.injectNow([Self.link])
            host.onLoop { $0.abandonConnect(BLEError.connectionTimeout(Self.nobody, within: .seconds(30))) }
        }.get()
        let c = try await connecting.value
        #expect(c.handle == 0x0777 && c.role == .central)
        #expect(await host.connections.map(\.handle) == [0x0777])
    }

    /// A connect to a private address a bond's IRK resolves, whose link the controller
    /// names by the peer's identity (as one that resolved the address through its
    /// resolving list does, in LE Enhanced Connection Complete): the link is the
    /// connect's. (Before, no connect waited for a link to the identity.)
    @Test func aLinkNamedByTheTargetsIdentityIsTheConnects() async throws {
        let radio = VirtualRadio()
        let t = Interposer(await radio.makeController(address: Self.me))
        let c = BluetoothHost(transport: t, logger: Bench.logger, security: SecurityOptions(random: .seeded(71)))
        let p = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:03:02")!), logger: Bench.logger,
                              security: SecurityOptions(random: .seeded(72), privacy: PrivacyOptions()))
        for h in [c, p] { try await h.start() }
        defer { Task { await c.close(); await p.close(); _ = radio } }
        try await p.peripheral.startAdvertising(AdvertisingSetsTests.named("private"))
        let first = try #require(try await PrivacyTests.find(c, "private"))
        let remote = try await c.central.connect(to: first, within: .seconds(5))
        #expect(try await remote.secure().bonded)
        _ = try await remote.disconnect()
        let identity = try #require(await p.identity)
        #expect(first.address != identity.address)
        let named = HCIEvent.le(.enhancedConnectionComplete(LEEnhancedConnectionComplete(
            connectionHandle: 0x0777, role: .central, peerAddressType: AddressType(rawValue: identity.addressType.rawValue | 0x02),
            peerAddress: identity.address, peerResolvablePrivateAddress: first.address)))
        t.intercept { packet in
            guard case let .command(op, _) = packet, op == .leCreateConnection else { return Self.endsLink0777(packet) }
            return .init(before: [.commandStatus(CommandStatus(status: .success, commandOpcode: .leCreateConnection)), named], forward: false)
        }
        let link = try await c.connect(toAnyOf: [DeviceAddress(first.address, type: first.addressType)], within: .seconds(2),
                                       parameters: LEConnectionParameters())
        #expect(link.handle == 0x0777 && link.peer == identity.address)
    }
    /// A host that connects and advertises at once: an LE Connection Complete that
    /// failed in the peripheral role (here Connection Failed to be Established) is not
    /// the connect's, which goes on until its own time runs out. One in the central role
    /// ends it, naming the controller's status. (Before, any failed LE Connection
    /// Complete ended the connect.)
    @Test(arguments: [ConnectionRole.peripheral, .central])
    func aFailedConnectionCompleteEndsTheConnectOnlyInTheCentralRole(role: ConnectionRole) async throws {
        let (radio, t, host) = try await rig()
        defer { Task { await host.close(); _ = radio } }
        let failed = HCIEvent.le(.connectionComplete(LEConnectionComplete(status: .connectionFailedToBeEstablished, connectionHandle: 0, role: role,
                                                                        peerAddressType: .public, peerAddress: Self.nobody)))
        t.intercept { packet in
            guard case let .command(op, _) = packet, op == .leCreateConnection else { return nil }
            return .init(after: [failed])
        }
        do {
            _ = try await host.central.connect(to: Self.nobody, within: .milliseconds(300))
            Issue.record("the connect to nobody succeeded")
        } catch let e as BLEError {
            switch (role, e) {
            case (.peripheral, .connectionTimeout): break
            case (.central, .connectionFailed(Self.nobody, .connectionFailedToBeEstablished)): break
            default: Issue.record("\(role): \(e)")
            }
        }
    }
}
