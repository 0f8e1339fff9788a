// Our Security Manager against the Linux kernel's own SMP (net/bluetooth/smp.c), in
// the QEMU guest (BLE_GUEST=1): our stack on hci0's user channel, the kernel on hci1.
// The kernel pairs because an L2CAP ATT socket asks for BT_SECURITY (2 encrypted, 3
// authenticated); its IO capability, bondable flag and Secure Connections are set
// through the management interface, and this test is the kernel's user agent there
// (it answers User Confirmation and User Passkey Requests and reads Passkey Notify),
// the part bluetoothd plays on a desktop. In both roles: pairing (legacy and Secure
// Connections, Just Works and Passkey Entry), then a second link encrypted from the
// stored keys on both sides without pairing; a wrong passkey fails on both sides.

import ATT
import BLETesting
import BlueZATT
import Foundation
import GATT
import HCI
import L2CAP
import Logging
import SMP
import Snoop
import Testing
import Transports

extension KernelTests {
    /// IO capabilities as the management interface numbers them (as SMP does).
    enum KernelIO: UInt8 { case displayOnly = 0, displayYesNo = 1, keyboardOnly = 2, noInputNoOutput = 3, keyboardDisplay = 4 }

    /// The user agent of the kernel's adapter: answers its questions, keeps what it said.
    actor KernelAgent {
        let mgmt: KernelManagement
        let index: UInt16
        /// What the kernel's user types when it asks for a passkey.
        let passkeyToType: UInt32?
        private(set) var displayed: [UInt32] = []
        private(set) var newKeys = 0
        private(set) var confirmations = 0
        private(set) var failures: [UInt8] = []
        private var displayWaiters: [CheckedContinuation<UInt32, Never>] = []
        private var task: Task<Void, Never>?

        init(mgmt: KernelManagement, index: UInt16, passkeyToType: UInt32?) {
            self.mgmt = mgmt
            self.index = index
            self.passkeyToType = passkeyToType
        }

        func start() {
            task = Task { for await e in mgmt.events where e.index == index { await handle(e) } }
        }

        func stop() { task?.cancel(); mgmt.close() }

        private func handle(_ e: KernelManagement.Event) async {
            switch e.code {
            case KernelManagement.EventCode.userConfirmRequest:
                confirmations += 1
                if let (a, t) = e.address { try? await mgmt.confirm(true, address: a, type: t, index: index) }
            case KernelManagement.EventCode.userPasskeyRequest:
                if let (a, t) = e.address { try? await mgmt.passkey(passkeyToType, address: a, type: t, index: index) }
            case KernelManagement.EventCode.passkeyNotify:
                var r = ByteReader(e.parameters)
                guard (try? r.skip(7)) != nil, let passkey = try? r.readUInt32() else { return }
                displayed.append(passkey)
                for w in displayWaiters { w.resume(returning: passkey) }
                displayWaiters.removeAll()
            case KernelManagement.EventCode.newLongTermKey:
                newKeys += 1
            case KernelManagement.EventCode.authenticationFailed:
                if let status = e.parameters.dropFirst(7).first { failures.append(status) }
            default:
                break
            }
        }

        /// The passkey the kernel shows its user (Passkey Notify).
        func passkeyShown() async -> UInt32 {
            if let p = displayed.last { return p }
            return await withCheckedContinuation { displayWaiters.append($0) }
        }
    }

    /// Types what the kernel displays, plus `offset` (non-zero: a user who mistyped).
    struct TypesKernelPasskey: PairingDelegate {
        let agent: KernelAgent
        var offset: UInt32 = 0
        func answer(_ prompt: PairingPrompt, peer: BluetoothAddress) async -> PairingAnswer {
            switch prompt {
            case .enterPasskey: return .passkey((await agent.passkeyShown() + offset) % 1_000_000)
            case .displayPasskey, .confirmNumber, .confirmPairing: return .confirmed(true)
            }
        }
    }

    /// hci1's kernel set up for a pairing test: powered, bondable, `io`, Secure
    /// Connections on or off, and no keys from an earlier test.
    static func kernelAdapter(io: KernelIO, secureConnections: Bool, passkeyToType: UInt32? = nil) async throws -> KernelAgent {
        let mgmt = try KernelManagement()
        // Powered off and on through the management interface, so the kernel sets the
        // adapter up as it does for bluetoothd even when HCIDEVUP powered it before.
        try await mgmt.setPowered(false, index: 1)
        try await mgmt.setPowered(true, index: 1)
        try await mgmt.setBondable(true, index: 1)
        try await mgmt.setIOCapability(io.rawValue, index: 1)
        try await mgmt.setSecureConnections(secureConnections ? 1 : 0, index: 1)
        try await mgmt.clearKeys(index: 1)
        let agent = KernelAgent(mgmt: mgmt, index: 1, passkeyToType: passkeyToType)
        await agent.start()
        return agent
    }

    /// A server whose FFF1 needs an encrypted link, FFF2 an authenticated one.
    static func protectedDatabase() throws -> AttributeDatabase {
        var db = AttributeDatabase()
        _ = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read], permissions: [.read, .readEncrypted], value: [0xE1]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF2), properties: [.read], permissions: [.read, .readEncrypted, .readAuthenticated], value: [0xA1]),
        ]))
        return db
    }

    /// Our side on hci0: user channel, L2CAP, a Security Manager with `config`.
    /// With `BLE_GUEST_RECORD` set to a directory, hci0's traffic goes to `record` there
    /// (how Fixtures/kernel-smp-*.btsnoop were made: real pairings with BlueZ's SMP).
    static func securedUserChannel(_ config: PairingConfiguration, delegate: any PairingDelegate, record: String? = nil)
        async throws -> (HCIController, L2CAPHost, SecurityManager, BluetoothAddress)
    {
        var transport: any HCITransport = try BlueZ.open(index: 0, channel: .user, logger: logger)
        if let record, let dir = ProcessInfo.processInfo.environment["BLE_GUEST_RECORD"] {
            transport = try RecordingTransport(wrapping: transport, recordingTo: dir + "/" + record)
        }
        let controller = HCIController(transport: transport, logger: logger)
        let address = try await controller.initialize().address
        let host = L2CAPHost(controller: controller, logger: logger)
        await host.start()
        let security = SecurityManager(l2cap: host, configuration: config, delegate: delegate, logger: logger)
        await security.start()
        return (controller, host, security, address)
    }

    /// The kernel is central: its ATT socket on hci1 asks for `level`, so its SMP pairs
    /// with our peripheral before the connect returns; its client then reads what
    /// needs that level. A second socket, after the link ended, gets an encrypted link
    /// from the keys both sides stored.
    func kernelCentralPairsWithUs(secureConnections sc: Bool, mitm: Bool, record: String? = nil) async throws {
        guard Guest.active, !Guest.unprivileged else { return }
        // With MITM the kernel types what we display.
        let agent = try await Self.kernelAdapter(io: mitm ? .keyboardDisplay : .noInputNoOutput, secureConnections: sc, passkeyToType: 654_321)
        defer { Task { await agent.stop() } }
        let config = PairingConfiguration(ioCapability: mitm ? .displayOnly : .noInputNoOutput, mitm: mitm, passkey: mitm ? 654_321 : nil)
        let (controller, host, security, hci0) = try await Self.securedUserChannel(config, delegate: AutomaticPairingDelegate(), record: record)
        let server = GATTServer(database: try Self.protectedDatabase(), logger: Self.logger)
        let securityEvents = await security.events()
        let connections = await host.newConnections()
        let acceptor = Task {
            for await c in connections {
                await server.attach(ATTBearer(channel: L2CAPATTChannel(host: host, handle: c.handle), logger: Self.logger), connection: c.handle)
            }
        }
        defer { acceptor.cancel() }
        // The server learns each link's security before the test goes on (the facade
        // does the same from the same events).
        let (applied, appliedSink) = AsyncStream.makeStream(of: SecurityEvent.self, bufferingPolicy: .bufferingOldest(16))
        let follower = Task {
            for await e in securityEvents {
                if case let .securityChanged(handle, s) = e {
                    await server.setSecurity(LinkSecurity(encrypted: s.encrypted, authenticated: s.authenticated, keySize: s.keySize), connection: handle)
                }
                appliedSink.yield(e)
            }
        }
        defer { follower.cancel() }
        var seen = applied.makeAsyncIterator()
        var pairings = 0
        let level: UInt8 = mitm ? 3 : 2
        for round in 1...2 {
            try await controller.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0))
            try await controller.send(LESetAdvertisingEnable(advertisingEnable: true))
            // The kernel's connect returns with the link up; its SMP runs beside.
            let channel = try await KernelATTChannel.connect(to: hci0, type: .public, from: try Self.address(of: 1), securityLevel: level)
            // Round 1: encryption with the new key, then the pairing's end (keys
            // distributed, bond stored); round 2: encryption from the bond alone.
            var state: (UInt16, LinkSecurityState)?
            while state == nil || (round == 1 && pairings == 0) {
                switch await seen.next() {
                case let .securityChanged(handle, s)?: state = (handle, s)
                case let .paired(handle, _, result)?: pairings += 1; state = (handle, result.security)
                case let .pairingFailed(_, _, e)?: Issue.record("round \(round): \(e)"); return
                case nil: Issue.record("round \(round): no security events"); return
                default: continue
                }
            }
            let (handle, ours) = try #require(state)
            #expect(ours.encrypted && ours.secureConnections == sc && ours.authenticated == mitm && ours.keySize == 16, "round \(round): \(ours)")
            #expect(ours.bonded, "round \(round): \(ours)")
            let client = GATTClient(bearer: ATTBearer(channel: channel, logger: Self.logger))
            await client.start()
            let chars = try await client.discoverCharacteristics(of: try #require(try await client.discoverPrimaryServices(uuid: BluetoothUUID(0xFFF0)).first))
            #expect(try await client.read(chars[0].valueHandle) == [0xE1], "round \(round)")
            if mitm {
                #expect(try await client.read(chars[1].valueHandle) == [0xA1], "round \(round)")
            } else {
                await #expect(throws: GATTClientError.self, "round \(round): Just Works is not authenticated") { _ = try await client.read(chars[1].valueHandle) }
            }
            // Our answers came after our Encryption Change, so the kernel has had its own.
            let kernelSees = try channel.socket.security()
            #expect(kernelSees.level >= level && kernelSees.keySize == 16, "round \(round): the kernel's BT_SECURITY \(kernelSees)")
            await Self.disconnect(handle, controller: controller, host: host)
            channel.close()
        }
        #expect(pairings == 1, "one pairing, then the stored keys")
        #expect(try await security.bonds().count == 1)
        let kernelKeys = await agent.newKeys
        #expect(kernelKeys >= 1, "the kernel stored no LTK")
        #expect(await agent.failures.isEmpty)
        if mitm { #expect(await agent.displayed.isEmpty, "the kernel typed; it displayed nothing") }
        await controller.close()
    }

    @Test func kernelCentralLegacyJustWorks() async throws { try await kernelCentralPairsWithUs(secureConnections: false, mitm: false) }
    @Test func kernelCentralSecureConnectionsJustWorks() async throws { try await kernelCentralPairsWithUs(secureConnections: true, mitm: false) }
    @Test func kernelCentralSecureConnectionsPasskey() async throws { try await kernelCentralPairsWithUs(secureConnections: true, mitm: true) }
    @Test func kernelCentralLegacyPasskey() async throws {
        try await kernelCentralPairsWithUs(secureConnections: false, mitm: true, record: "kernel-smp-legacy-passkey.btsnoop")
    }

    /// The kernel is peripheral: its listening ATT socket on hci1 asks for `level`, so
    /// it sends a Security Request when we connect; we pair (typing the passkey the
    /// kernel displays when MITM is asked), then encrypt a second link from the bond.
    func wePairWithKernelPeripheral(secureConnections sc: Bool, mitm: Bool, typo: UInt32 = 0, record: String? = nil) async throws {
        guard Guest.active, !Guest.unprivileged else { return }
        let agent = try await Self.kernelAdapter(io: mitm ? .displayOnly : .noInputNoOutput, secureConnections: sc)
        defer { Task { await agent.stop() } }
        let hci1 = try Self.address(of: 1)
        let level: UInt8 = mitm ? 3 : 2
        let listener = try KernelATTSocket.listen(on: hci1, securityLevel: level)
        defer { listener.close() }
        let adv = try await Self.advertiseOnHci1()
        let config = PairingConfiguration(ioCapability: mitm ? .keyboardOnly : .noInputNoOutput, mitm: mitm, secureConnections: sc)
        let (central, host, security, _) = try await Self.securedUserChannel(config, delegate: TypesKernelPasskey(agent: agent, offset: typo), record: record)
        let rounds = typo == 0 ? 2 : 1
        for round in 1...rounds {
            do { try await adv.send(LESetAdvertisingEnable(advertisingEnable: true)) } catch HCIError.commandFailed(_, .commandDisallowed) {}
            let accepted = Task { try await KernelATTChannel.accept(on: listener) }
            let connections = await host.newConnections()
            try await central.send(LECreateConnection(peerAddressType: .public, peerAddress: hci1))
            let link = try #require(await firstElement(connections, within: .seconds(60)))
            let wanted: SecurityLevel = mitm ? .authenticated : .encrypted
            if typo != 0 {
                await #expect(throws: SecurityError.pairing(.remote(.confirmValueFailed))) { try await security.secure(handle: link.handle, level: wanted) }
                await Self.disconnect(link.handle, controller: central, host: host)
                accepted.cancel()
                break
            }
            let state = try await security.secure(handle: link.handle, level: wanted)
            #expect(state.encrypted && state.secureConnections == sc && state.authenticated == mitm && state.bonded && state.keySize == 16,
                    "round \(round): \(state)")
            // The kernel's channel is handed over once the link has its level.
            let channel = try await accepted.value
            let kernelSees = try channel.socket.security()
            #expect(kernelSees.level >= level, "round \(round): the kernel's BT_SECURITY \(kernelSees)")
            await Self.disconnect(link.handle, controller: central, host: host)
            channel.close()
        }
        let bonds = try await security.bonds()
        let failures = await agent.failures
        if typo != 0 {
            #expect(bonds.isEmpty)
            // The kernel's Authentication Failed (mgmt status 0x05) after it sent Pairing Failed.
            #expect(failures == [0x05], "\(failures)")
        } else {
            #expect(bonds.count == 1 && bonds.first?.matches(hci1, type: .public) == true, "\(bonds)")
            #expect(failures.isEmpty, "\(failures)")
            let kernelKeys = await agent.newKeys
            #expect(kernelKeys >= 1, "the kernel stored no LTK")
            if mitm { #expect(await agent.displayed.count == 1) }
        }
        await central.close()
        await adv.close()
    }

    @Test func kernelPeripheralLegacyJustWorks() async throws { try await wePairWithKernelPeripheral(secureConnections: false, mitm: false) }
    @Test func kernelPeripheralSecureConnectionsJustWorks() async throws { try await wePairWithKernelPeripheral(secureConnections: true, mitm: false) }
    @Test func kernelPeripheralSecureConnectionsPasskey() async throws {
        try await wePairWithKernelPeripheral(secureConnections: true, mitm: true, record: "kernel-smp-sc-passkey.btsnoop")
    }
    @Test func kernelPeripheralLegacyPasskey() async throws { try await wePairWithKernelPeripheral(secureConnections: false, mitm: true) }
    @Test func aWrongPasskeyFailsAgainstTheKernel() async throws { try await wePairWithKernelPeripheral(secureConnections: true, mitm: true, typo: 1) }
}
