// Our credit-based channels against Bumble's (`bumble.l2cap.LeCreditBasedChannel`),
// both hosts on Rootcanal, in both roles and both modes (LE, and enhanced with several
// channels per request): SDUs of several sizes echoed back, credits exhausted and
// refilled on both sides (small initial credits, small MPS), a refused SPSM, a clean
// close from each side, and a link that goes down in the middle of an SDU.

import BLETesting
import Foundation
import GAP
import HCI
import L2CAP
import Logging
import Testing
import Transports

@Suite(.serialized, .liveTimeLimit) struct BumbleL2CAPTests {
    static let bumble = BluetoothAddress("F1:F2:F3:F4:F5:F6")!
    /// Bytes each way (`BLE_L2CAP_BYTES`, default 16 KiB); Rootcanal's connection events
    /// pace the transfer, a few K-frames per 45 ms event.
    static let total = ProcessInfo.processInfo.environment["BLE_L2CAP_BYTES"].flatMap(Int.init) ?? 16 * 1024

    static func lines(_ pipe: Pipe) async -> [[String: Any]] {
        let data = await Interop.readAll(pipe)
        return String(decoding: data, as: UTF8.self).split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    static func host(_ port: UInt16) async throws -> (HCIController, L2CAPHost, ControllerInfo) {
        let logger = Interop.logger
        let controller = HCIController(transport: try StreamTransports.tcp(host: "127.0.0.1", port: port, logger: logger), logger: logger)
        let info = try await controller.initialize()
        let host = L2CAPHost(controller: controller, logger: logger)
        await host.start()
        return (controller, host, info)
    }

    @Test func ourChannelToBumblesServer() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (controller, host, _) = try await Self.host(rc.hciPort)
        let (peer, out) = try Interop.launchBumble(python, "bumble_l2cap_peer.py", port: rc.hciPort, ["server"])
        defer { RootcanalProcess.kill(peer) }

        let link = try await TestCentral.connect(to: Self.bumble, type: .random, host: host, within: .seconds(20))
        // No server on 0x0081: Bumble answers "SPSM not supported".
        await #expect(throws: L2CAPChannelError.refused(.spsmNotSupported)) {
            _ = try await host.connectChannel(spsm: 0x81, handle: link.handle)
        }
        // Two credits and a 200-byte MPS our way: Bumble's echoes wait on our credits.
        let channel = try await host.connectChannel(spsm: 0x80, handle: link.handle, parameters: CreditBasedParameters(mtu: 1024, mps: 200, initialCredits: 2))
        #expect(channel.info.remote.mtu == 1024 && channel.info.remote.mps == 100 && channel.info.remote.initialCredits == 4)
        let pattern = [1, 23, 100, 1024, 300, 7, 1023, 64]
        var sdus: [[UInt8]] = []
        var left = Self.total, i = 0
        while left > 0 {
            let n = min(pattern[i % pattern.count], left)
            sdus.append((0..<n).map { UInt8(($0 + i) & 0xFF) })
            left -= n
            i += 1
        }
        let t0 = ContinuousClock.now
        let toSend = sdus
        async let sending: Void = { for s in toSend { try await channel.send(s) } }()
        // Bumble's channel joins what is queued when it sends (its `write` is a byte
        // stream), so the echo comes back in other SDU boundaries: compare the bytes.
        var echoed: [UInt8] = []
        for try await s in channel.sdus {
            echoed += s
            if echoed.count >= Self.total { break }
        }
        try await sending
        let elapsed = ContinuousClock.now - t0
        #expect(echoed == sdus.flatMap { $0 })
        await channel.close()  // returns once Bumble answered the Disconnection Request
        _ = try? await controller.send(Disconnect(connectionHandle: link.handle))
        _ = await Interop.exit(of: peer)
        let events = await Self.lines(out)
        let closed = events.first { $0["event"] as? String == "channel-closed" }
        #expect(closed?["sdus"] as? Int == sdus.count && closed?["bytes"] as? Int == Self.total, "\(events)")
        print("BumbleL2CAPTests: \(Self.total) bytes each way in \(elapsed)")
        await controller.close()
    }

    @Test func bumblesChannelToOurServer() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (controller, host, info) = try await Self.host(rc.hciPort)
        // MPS 50 and 2 credits our way: Bumble's 512-byte SDUs need credits back mid-SDU.
        let accepted = await host.listen(spsm: 0x82, parameters: CreditBasedParameters(mtu: 512, mps: 50, initialCredits: 2))
        try await controller.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0))
        try await controller.send(LESetAdvertisingEnable(advertisingEnable: true))

        let (peer, out) = try Interop.launchBumble(python, "bumble_l2cap_peer.py", port: rc.hciPort, ["client", info.address.description, String(Self.total)])
        defer { RootcanalProcess.kill(peer) }

        let channel = try #require(await firstElement(accepted, within: .seconds(30)), "Bumble opened no channel")
        #expect(channel.info.remote.mtu == 512 && channel.info.remote.mps == 60 && channel.info.remote.initialCredits == 3)
        var bytes = 0
        // Echo until Bumble closes the channel: the sequence then ends cleanly.
        for try await sdu in channel.sdus {
            bytes += sdu.count
            try await channel.send(sdu)
        }
        #expect(bytes == Self.total)
        #expect(await channel.closeReason == .closedByPeer)
        _ = await Interop.exit(of: peer)
        let events = await Self.lines(out)
        let echoed = events.first { $0["event"] as? String == "echoed" }
        #expect(echoed?["same"] as? Bool == true && echoed?["bytes"] as? Int == Self.total, "\(events)")
        await controller.close()
    }

    /// Enhanced mode, our side asking: three channels with one Credit Based Connection
    /// Request to Bumble's echo server, an SDU on each; a refused SPSM refuses them all
    /// (Bumble lists no Destination CIDs in that response).
    @Test func ourEnhancedChannelsToBumblesServer() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (controller, host, _) = try await Self.host(rc.hciPort)
        let (peer, out) = try Interop.launchBumble(python, "bumble_l2cap_peer.py", port: rc.hciPort, ["server"])
        defer { RootcanalProcess.kill(peer) }

        let link = try await TestCentral.connect(to: Self.bumble, type: .random, host: host, within: .seconds(20))
        await #expect(throws: L2CAPChannelError.refused(.spsmNotSupported)) {
            _ = try await host.connectChannels(spsm: 0x81, count: 2, handle: link.handle)
        }
        // Credits enough for every echo: Bumble 0.0.236 files the channels it accepts in
        // enhanced mode under its own CIDs, but looks Flow Control Credit Indications up
        // by the sender's CID (ours, as §4.24 says), so it never sees credits we give
        // back on them. (Credits returned on enhanced channels are covered below, with
        // Bumble as the requester, where it files them by our CID.)
        let channels = try await host.connectChannels(spsm: 0x80, count: 3, handle: link.handle, parameters: CreditBasedParameters(mtu: 1024, mps: 64, initialCredits: 40))
        #expect(channels.count == 3 && Set(channels.map(\.info.remoteCID)).count == 3)
        #expect(channels.allSatisfy { $0.info.enhanced && $0.info.remote.mtu == 1024 && $0.info.remote.mps == 100 })
        // A different SDU on each channel, all at once; each echo comes back on its own channel.
        try await withThrowingTaskGroup(of: Void.self) { g in
            for (i, ch) in channels.enumerated() {
                g.addTask {
                    let sdu = (0..<(300 + 200 * i)).map { UInt8(($0 + i) & 0xFF) }
                    try await ch.send(sdu)
                    var echoed: [UInt8] = []
                    for try await s in ch.sdus {
                        echoed += s
                        if echoed.count >= sdu.count { break }
                    }
                    #expect(echoed == sdu, "channel \(i)")
                }
            }
            try await g.waitForAll()
        }
        for ch in channels { await ch.close() }
        _ = try? await controller.send(Disconnect(connectionHandle: link.handle))
        _ = await Interop.exit(of: peer)
        let events = await Self.lines(out)
        #expect(events.filter { $0["event"] as? String == "channel-closed" }.count == 3, "\(events)")
        await controller.close()
    }

    /// Enhanced mode, Bumble asking: two channels with one request to our server, three
    /// SDUs echoed on each; then Bumble sends the first K-frame of a 400-byte SDU and
    /// drops the link. Our reader gets every whole SDU, never the partial one, and then
    /// the link's end with Bumble's reason.
    @Test func bumblesEnhancedChannelsAndALinkLostMidSDU() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (controller, host, info) = try await Self.host(rc.hciPort)
        let accepted = await host.listen(spsm: 0x82, parameters: CreditBasedParameters(mtu: 512, mps: 80, initialCredits: 3))
        try await controller.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0))
        try await controller.send(LESetAdvertisingEnable(advertisingEnable: true))

        let (peer, out) = try Interop.launchBumble(python, "bumble_l2cap_peer.py", port: rc.hciPort, ["enhanced-client", info.address.description])
        defer { RootcanalProcess.kill(peer) }

        var it = accepted.makeAsyncIterator()
        var channels: [L2CAPChannel] = []
        for _ in 0..<2 { channels.append(try #require(await it.next(), "Bumble opened fewer than two channels")) }
        #expect(channels.allSatisfy { $0.info.enhanced && $0.info.remote == CreditBasedParameters(mtu: 512, mps: 64, initialCredits: 3) })
        let results = try await withThrowingTaskGroup(of: (Int, [[UInt8]], (any Error)?).self) { g in
            for (i, ch) in channels.enumerated() {
                g.addTask {
                    var got: [[UInt8]] = []
                    do {
                        for try await sdu in ch.sdus {
                            got.append(sdu)
                            try await ch.send(sdu)
                        }
                        return (i, got, nil)
                    } catch {
                        return (i, got, error)
                    }
                }
            }
            var all: [(Int, [[UInt8]], (any Error)?)] = []
            for try await r in g { all.append(r) }
            return all.sorted { $0.0 < $1.0 }
        }
        for (i, got, error) in results {
            #expect(got == [10, 200, 512].map { Array(repeating: UInt8(i + 1), count: $0) }, "channel \(i)")
            #expect(error as? L2CAPChannelError == .closed(.linkLost(.remoteUserTerminatedConnection)), "channel \(i): \(String(describing: error))")
        }
        _ = await Interop.exit(of: peer)
        let events = await Self.lines(out)
        let echoed = events.first { $0["event"] as? String == "echoed" }
        #expect(echoed?["same"] as? Bool == true, "\(events)")
        #expect(events.contains { $0["event"] as? String == "disconnected-mid-sdu" }, "\(events)")
        await controller.close()
    }
}
