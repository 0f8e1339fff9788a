// L2CAP credit-based channels against the real kernel's L2CAP in the QEMU guest
// (BLE_GUEST=1), btvirt's hci0 and hci1: the kernel's CoC sockets
// (`KernelL2CAPChannel`, BT_MODE_LE_FLOWCTL and BT_MODE_EXT_FLOWCTL) on one side, our
// user-space L2CAP on the HCI user channel on the other, in both roles and both
// modes. The kernel's L2CAP is a peer nobody here wrote; it also proves the kernel
// backend of `SDUChannel`.

import ATT
import BLETesting
import BlueZATT
import Foundation
import GATT
import HCI
import L2CAP
import Testing
import Transports

extension KernelTests {
    /// Whether `sdus` ends, without an error and with no SDU before its end, within 60 s
    /// of the emulator's time (a hang fails here, under the test's name).
    static func endsNext<S: AsyncSequence & Sendable>(_ sdus: S) async -> Bool where S.Element: Sendable {
        await firstElement(AsyncStream<Bool> { k in
            Task {
                var it = sdus.makeAsyncIterator()
                do { k.yield(try await it.next() == nil) } catch { k.yield(false) }
            }
        }, within: .seconds(60)) == true
    }

    /// Lets the kernel take enhanced credit-based mode (its `enable_ecred` parameter, root only).
    static func enableEnhancedMode() throws {
        try "1".write(toFile: "/sys/module/bluetooth/parameters/enable_ecred", atomically: false, encoding: .utf8)
    }

    /// hci1 advertises (connectable) through the raw channel, driven by our stack.
    static func advertiseOnHci1() async throws -> HCIController {
        try BlueZ.setPower(index: 1, on: true)
        let adv = HCIController(transport: try BlueZ.open(index: 1, channel: .raw, logger: logger), logger: logger)
        try await adv.initialize(reset: false)
        do { try await adv.send(LESetAdvertisingEnable(advertisingEnable: false)) } catch HCIError.commandFailed(_, .commandDisallowed) {}
        try await adv.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0))
        try await adv.send(LESetAdvertisingEnable(advertisingEnable: true))
        return adv
    }

    static func pattern(_ n: Int, _ seed: Int) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ seed) } }

    /// Ends the link from our side and waits for Disconnection Complete (5 s at most),
    /// so that neither btvirt adapter keeps a link the next kernel test would trip on.
    /// What was sent last (the keys a pairing distributes) goes out first, as the
    /// facade's `disconnect` does: btvirt has one LE buffer, and a Disconnect sent while
    /// the last key waits for it would end the link before the kernel has its keys.
    static func disconnect(_ handle: UInt16, controller: HCIController, host: L2CAPHost) async {
        await host.flush(handle: handle, within: .seconds(2))
        let events = await host.linkEvents()
        _ = try? await controller.send(Disconnect(connectionHandle: handle))
        let gone = events.filter { if case let .disconnected(c, _) = $0 { return c.handle == handle } else { return false } }
        _ = await collect(gone, count: 1, within: .seconds(5))
    }

    /// The kernel listens on hci1 (LE mode, then enhanced mode); our stack on hci0 opens
    /// channels to it: SDUs of several sizes both ways (the kernel's MTU 1000 against our
    /// MPS 100, 4 credits, so both sides segment and credits run out and come back), a
    /// refused SPSM, the kernel closing.
    @Test func ourChannelsToTheKernelsServer() async throws {
        guard Guest.active, !Guest.unprivileged else { return }
        try Self.enableEnhancedMode()
        let hci1 = try Self.address(of: 1)
        let le = try KernelL2CAPSocket.listen(spsm: 0x0081, mode: .le, receiveMTU: 1000, on: hci1)
        defer { le.close() }
        let enhanced = try KernelL2CAPSocket.listen(spsm: 0x0082, mode: .enhanced, receiveMTU: 1000, on: hci1)
        defer { enhanced.close() }
        let adv = try await Self.advertiseOnHci1()
        let (central, host, _) = try await Self.userChannel(0)
        let connections = await host.newConnections()
        try await central.send(LECreateConnection(peerAddressType: .public, peerAddress: hci1))
        let link = try #require(await firstElement(connections, within: .seconds(60)))
        let ours = CreditBasedParameters(mtu: 1500, mps: 100, initialCredits: 4)

        // LE mode.
        await #expect(throws: L2CAPChannelError.refused(.spsmNotSupported)) { _ = try await host.connectChannel(spsm: 0x0099, handle: link.handle, parameters: ours) }
        let accepting = Task { try await KernelL2CAPChannel.accept(on: le, spsm: 0x0081) }
        let mine = try await host.connectChannel(spsm: 0x0081, handle: link.handle, parameters: ours)
        let theirs = try await accepting.value
        #expect(mine.maximumSendSize == 1000 && theirs.maximumSendSize == 1500, "\(mine) / \(theirs)")
        try await Self.exchange(mine, theirs)
        // The kernel closes: our SDUs end in order.
        await theirs.close()
        #expect(await Self.endsNext(mine.sdus))

        // Enhanced mode: two channels with one request.
        let acceptingTwo = Task { [try await KernelL2CAPChannel.accept(on: enhanced, spsm: 0x0082, mode: .enhanced),
                                   try await KernelL2CAPChannel.accept(on: enhanced, spsm: 0x0082, mode: .enhanced)] }
        let two = try await host.connectChannels(spsm: 0x0082, count: 2, handle: link.handle, parameters: ours)
        let kernelTwo = try await acceptingTwo.value
        #expect(two.count == 2 && two.allSatisfy { $0.info.enhanced }, "\(two)")
        // Which accepted socket is which channel: each echoes what it gets.
        for k in kernelTwo {
            Task { for try await sdu in k.sdus { try await k.send(sdu) } }
        }
        for (i, c) in two.enumerated() {
            let sdu = Self.pattern(900, i)
            try await c.send(sdu)
            #expect(await firstElement(c.sdus, within: .seconds(60)) == sdu)
        }
        for c in two { await c.close() }
        for k in kernelTwo { await k.close() }
        await Self.disconnect(link.handle, controller: central, host: host)
        await central.close()
        await adv.close()
    }

    /// Our stack listens on hci0 (either mode); the kernel on hci1 opens channels to it:
    /// a refused SPSM is ECONNREFUSED; LE mode, then enhanced mode; we close.
    @Test func theKernelsChannelsToOurServer() async throws {
        guard Guest.active, !Guest.unprivileged else { return }
        try Self.enableEnhancedMode()
        let (peripheral, host, hci0) = try await Self.userChannel(0)
        let accepted = await host.listen(spsm: 0x0083, parameters: CreditBasedParameters(mtu: 1500, mps: 100, initialCredits: 4))
        try await peripheral.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0))
        try await peripheral.send(LESetAdvertisingEnable(advertisingEnable: true))
        try BlueZ.setPower(index: 1, on: true)
        let hci1 = try Self.address(of: 1)
        // Refused first, while nothing else is on the link: in runs where the kernel's
        // request crossed our credits right after a transfer, btvirt once in a few runs
        // never delivered it to hci0 (the monitor shows it sent on hci1, never received
        // on hci0), and the kernel gave up after its 40 s connect timeout.
        await #expect(throws: L2CAPError(operation: "opening a channel to \(hci0) (public) SPSM 0x0084", errno: ECONNREFUSED)) {
            _ = try await KernelL2CAPChannel.connect(to: hci0, type: .public, spsm: 0x0084, from: hci1)
        }
        let theirs = try await KernelL2CAPChannel.connect(to: hci0, type: .public, spsm: 0x0083, receiveMTU: 1000, from: hci1)
        let mine = try #require(await firstElement(accepted, within: .seconds(60)))
        #expect(!mine.info.enhanced && mine.maximumSendSize == 1000 && theirs.maximumSendSize == 1500, "\(mine) / \(theirs)")
        try await Self.exchange(mine, theirs)

        let enhanced = try await KernelL2CAPChannel.connect(to: hci0, type: .public, spsm: 0x0083, mode: .enhanced, receiveMTU: 1000, from: hci1)
        let mine2 = try #require(await firstElement(accepted, within: .seconds(60)))
        #expect(mine2.info.enhanced, "\(mine2)")
        try await Self.exchange(mine2, enhanced)
        // We close: the kernel's SDUs end in order.
        await mine.close()
        #expect(await Self.endsNext(theirs.sdus))
        await mine2.close()
        await enhanced.close()
        await Self.disconnect(mine.handle, controller: peripheral, host: host)
        await peripheral.close()
    }

    /// SDUs of 1, 99, 100, 101 and the peer's MTU bytes each way, then 64 KiB from the
    /// kernel in its largest SDUs while our side takes them: more than our 4 credits
    /// cover, so the transfer lives on the credits we give back.
    static func exchange(_ mine: L2CAPChannel, _ theirs: KernelL2CAPChannel) async throws {
        var fromKernel = mine.sdus.makeAsyncIterator(), fromUs = theirs.sdus.makeAsyncIterator()
        for n in [1, 99, 100, 101, mine.maximumSendSize] {
            let sdu = pattern(n, n)
            try await mine.send(sdu)
            #expect(try await fromUs.next() == sdu)
        }
        for n in [1, 99, 100, 101, theirs.maximumSendSize] {
            let sdu = pattern(n, n + 1)
            try await theirs.send(sdu)
            #expect(try await fromKernel.next() == sdu)
        }
        let total = 64 * 1024, piece = theirs.maximumSendSize
        let sending = Task {
            var sent = 0
            while sent < total {
                let n = Swift.min(piece, total - sent)
                try await theirs.send(pattern(n, sent))
                sent += n
            }
        }
        var got = 0
        while got < total, let sdu = try await fromKernel.next() {
            #expect(sdu == pattern(sdu.count, got))
            got += sdu.count
        }
        try await sending.value
        #expect(got == total)
    }
}

extension KernelTests {
    /// `btctl l2cap connect` (a real btctl process on hci0's user channel) to the
    /// kernel's LE server on hci1, whose socket asks for BT_SECURITY_MEDIUM: the
    /// kernel refuses an unencrypted link ("insufficient authentication",
    /// l2cap_le_connect_req), btctl pairs (Just Works; this test is the kernel's
    /// agent), asks again and gets the channel, which echoes what btctl sends. A second
    /// run with the same bond file is refused again and encrypts from the bond (the
    /// kernel stores no new key); a third, with `--security encrypted`, encrypts before
    /// it asks. bluetoothd's part on hci1 is played here: a GATT server on the kernel's
    /// ATT socket answers btctl's MTU exchange and holds the link (the kernel ends an
    /// LE link no socket uses after 2 s).
    @Test func btctlConnectsToTheKernelsProtectedServer() async throws {
        guard Guest.active, !Guest.unprivileged else { return }
        let btctl = FileManager.default.currentDirectoryPath + "/.build/debug/btctl"
        try #require(FileManager.default.isExecutableFile(atPath: btctl), "build btctl first")
        let agent = try await Self.kernelAdapter(io: .noInputNoOutput, secureConnections: true)
        defer { Task { await agent.stop() } }
        let hci1 = try Self.address(of: 1)
        let listener = try KernelL2CAPSocket.listen(spsm: 0x0085, mode: .le, receiveMTU: 1000, securityLevel: 2, on: hci1)
        defer { listener.close() }
        let attListener = try KernelATTSocket.listen(on: hci1)
        defer { attListener.close() }
        let server = GATTServer(database: AttributeDatabase(), logger: Guest.logger)
        let adv = try await Self.advertiseOnHci1()
        let bonds = NSTemporaryDirectory() + "btctl-kernel-bonds-\(getpid()).json"
        defer { try? FileManager.default.removeItem(atPath: bonds) }
        let input = Self.pattern(300, 3)
        var keysAfter: [Int] = []
        for (round, extra) in [[], [], ["--security", "encrypted"]].enumerated() {
            do { try await adv.send(LESetAdvertisingEnable(advertisingEnable: true)) } catch HCIError.commandFailed(_, .commandDisallowed) {}
            let att = Task {
                let ch = try await KernelATTChannel.accept(on: attListener)
                await server.attach(ATTBearer(channel: ch, logger: Guest.logger), connection: UInt16(round + 1))
                return ch
            }
            let echo = Task {
                let ch = try await KernelL2CAPChannel.accept(on: listener, spsm: 0x0085)
                let level = try ch.socket.security().level
                for try await sdu in ch.sdus { try await ch.send(sdu) }
                return level
            }
            let run = try await Self.runBtctl(btctl, ["l2cap", "connect", hci1.description, "--spsm", "0x85", "-t", "hci0", "--json", "--wait", "1",
                                                      "--io-capability", "no-input-no-output", "--bonds", bonds] + extra, input: input)
            // Bounded: a kernel that never saw the channel leaves its accept waiting.
            let level = await Self.value(of: echo, within: .seconds(10))
            let attChannel = await Self.value(of: att, within: .seconds(2))
            attChannel?.close()
            #expect(run.status == 0, "\(extra): \(run.err)")
            let events = run.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            let secured = events.filter { $0["event"] as? String == "secured" }
            #expect(secured.count == 1 && secured.first?["bonded"] as? Bool == true, "\(extra): \(run.out)")
            let echoed = events.filter { $0["event"] as? String == "sdu" }.compactMap { $0["value"] as? String }.joined()
            #expect(echoed == input.map { String(format: "%02x", $0) }.joined(), "\(extra): \(run.out) \(run.err)")
            guard let level else {
                Issue.record("\(extra): the kernel's server got no channel")
                break
            }
            #expect(level >= 2, "\(extra): the kernel's BT_SECURITY \(level)")
            keysAfter.append(await agent.newKeys)
        }
        // One pairing (the kernel stores its keys then), none after.
        #expect(keysAfter.count == 3 && keysAfter[0] >= 1 && keysAfter[1] == keysAfter[0] && keysAfter[2] == keysAfter[0], "\(keysAfter)")
        await adv.close()
    }

    /// `task`'s value, or nil when it throws or has none within `limit` (the task goes on).
    static func value<T: Sendable>(of task: Task<T, any Error>, within limit: Duration) async -> T? {
        await firstElement(AsyncStream<T?> { k in Task { k.yield(try? await task.value) } }, within: limit) ?? nil
    }

    /// btctl with `args`, `input` on standard input (its output through files); killed
    /// (by PID) after 60 s. posix_spawn rather than Foundation's Process, which in the
    /// guest cannot make its run loop's wake-up socket pair; waited for on a thread of
    /// its own, not on the cooperative pool (one CPU in the guest).
    static func runBtctl(_ path: String, _ args: [String], input: [UInt8]) async throws -> (status: Int32, out: String, err: String) {
        let dir = NSTemporaryDirectory() + "btctl-run-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Data(input).write(to: URL(fileURLWithPath: dir + "/in"))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, dir + "/in", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, dir + "/out", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, dir + "/err", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + args).map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, path, &actions, nil, argv, environ)
        guard spawned == 0 else { throw L2CAPError(operation: "starting btctl", errno: spawned) }
        let child = pid
        let killer = Task {
            try await Task.sleep(for: .seconds(60))
            kill(child, SIGKILL)
        }
        let status = await withCheckedContinuation { (c: CheckedContinuation<Int32, Never>) in
            Thread.detachNewThread {
                var status: Int32 = 0
                while waitpid(child, &status, 0) < 0, errno == EINTR {}
                c.resume(returning: status)
            }
        }
        killer.cancel()
        let out = (try? String(contentsOfFile: dir + "/out", encoding: .utf8)) ?? ""
        let err = (try? String(contentsOfFile: dir + "/err", encoding: .utf8)) ?? ""
        // Exited: its status; killed by a signal: 128 + the signal, as a shell says.
        let code = (status & 0x7F) == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        return (code, out, err)
    }
}
