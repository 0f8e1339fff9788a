#if canImport(Glibc)
import Glibc
#endif
import BLETesting
import Logging
import NIOCore
import NIOEmbedded
import Snoop
import Synchronization
import Testing
@testable import HCI

@Suite(.timeLimit(.minutes(3)))
struct ControllerTests {
    static let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

    /// A controller on the scripted transport whose loop is a testing loop: its time
    /// moves only when a test advances it (`advanceTime`), so no timer fires unasked.
    func make(timeout: Duration = .seconds(2)) -> (HCIController, ScriptedTransport, NIOAsyncTestingEventLoop) {
        let t = ScriptedTransport()
        let loop = NIOAsyncTestingEventLoop()
        return (HCIController(transport: t, commandTimeout: timeout, loop: loop, logger: Self.logger), t, loop)
    }

    @Test func commandCompleteIsMatchedAndDecoded() async throws {
        let (c, t, _) = make()
        let rssi = Task { try await c.send(ReadRSSI(connectionHandle: 0x40)) }
        try await t.expect(ReadRSSI(connectionHandle: 0x40).packet)
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .readRSSI, returning: ReadRSSI.ReturnParameters(connectionHandle: 0x40, rssi: -42))))
        #expect(try await rssi.value.rssi == -42)
    }

    /// A controller that answers commands nobody sent (another opcode, a Command Status
    /// for a command that completes with Command Complete but names another opcode, a
    /// truncated answer to another) does not finish the command in flight: its own
    /// answer still does, with its own value. A truncated answer to *it* is a typed
    /// error, and the credit it carried lets the next command go.
    @Test func answersToCommandsNobodySentLeaveTheOneInFlight() async throws {
        let (c, t, _) = make()
        let rssi = Task { try await c.send(ReadRSSI(connectionHandle: 0x40)) }
        try await t.expect(ReadRSSI(connectionHandle: 0x40).packet)
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .reset, returnParameters: [0])))
        t.inject(HCIEvent.commandStatus(CommandStatus(status: .commandDisallowed, commandOpcode: .leCreateConnection)))
        t.inject(.event(code: .commandComplete, parameters: [1, 0x03, 0x0C]))
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .readRSSI, returning: ReadRSSI.ReturnParameters(connectionHandle: 0x40, rssi: -42))))
        #expect(try await rssi.value.rssi == -42)
        // Its answer cut short: a typed error, and the credit it carried is used.
        let cut = Task { try await c.send(ReadRSSI(connectionHandle: 0x40)) }
        try await t.expect(ReadRSSI(connectionHandle: 0x40).packet)
        t.inject(.event(code: .commandComplete, parameters: [1, 0x05, 0x14, 0x00, 0x40]))
        await #expect(throws: HCIError.self) { _ = try await cut.value }
        let next = Task { try await c.send(ReadBDADDR()) }
        try await t.expect(ReadBDADDR().packet)
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .readBDADDR, returnParameters: [0, 1, 2, 3, 4, 5, 6])))
        _ = try await next.value
    }

    /// `addAnswerObserver` sees each command the controller answered, with its
    /// parameters and its answer (a failing status too), on the loop before the caller
    /// resumes; answers to commands nobody sent are not shown to it.
    @Test func answerObserversSeeEachAnsweredCommand() async throws {
        let (c, t, loop) = make()
        let seen = Mutex<[(HCIOpcode, [UInt8], CommandFlow.Outcome)]>([])
        await c.addAnswerObserver { e, outcome in
            precondition(loop.inEventLoop)
            seen.withLock { $0.append((e.opcode, e.parameters, outcome)) }
        }
        let enable = LESetExtendedAdvertisingEnable(enable: true, sets: [.init(advertisingHandle: 2, duration: 100)])
        let r = Task {
            try await c.send(enable)
            return seen.withLock { $0.count }
        }
        try await t.expect(enable.packet)
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .reset, returnParameters: [0])))
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .leSetExtendedAdvertisingEnable, returnParameters: [0])))
        #expect(try await r.value == 1, "seen before the caller resumed")
        let refused = Task { try await c.send(LESetScanEnable(scanEnable: true)) }
        _ = await t.nextSent()
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .leSetScanEnable, returnParameters: [0x0C])))
        await #expect(throws: HCIError.self) { try await refused.value }
        let all = seen.withLock { $0 }
        #expect(all.map { $0.0 } == [HCIOpcode.leSetExtendedAdvertisingEnable, .leSetScanEnable])
        #expect(all.first?.1 == enable.parameters && all.first?.2 == .complete([0]))
        #expect(all.last?.2 == .complete([0x0C]))
    }

    @Test func nonZeroStatusIsATypedError() async throws {
        let (c, t, _) = make()
        let r = Task { try await c.send(LESetAdvertisingEnable(advertisingEnable: true)) }
        _ = await t.nextSent()
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .leSetAdvertisingEnable, returnParameters: [0x0C])))
        await #expect(throws: HCIError.commandFailed(opcode: .leSetAdvertisingEnable, status: .commandDisallowed)) { try await r.value }
    }

    @Test func commandStatusFinishesStatusCommands() async throws {
        let (c, t, _) = make()
        let peer = BluetoothAddress("11:22:33:44:55:66")!
        let r = Task { try await c.send(LECreateConnection(peerAddressType: .public, peerAddress: peer)) }
        _ = await t.nextSent()
        t.inject(HCIEvent.commandStatus(CommandStatus(status: .success, commandOpcode: .leCreateConnection)))
        _ = try await r.value
        let d = Task { try await c.send(Disconnect(connectionHandle: 1)) }
        _ = await t.nextSent()
        t.inject(HCIEvent.commandStatus(CommandStatus(status: .unknownConnectionIdentifier, commandOpcode: .disconnect)))
        await #expect(throws: HCIError.commandFailed(opcode: .disconnect, status: .unknownConnectionIdentifier)) { try await d.value }
    }

    /// Cancelling a caller withdraws its command while it waits for a credit
    /// (CancellationError); a command already sent is carried out by the controller,
    /// so its caller gets the answer.
    @Test func cancellingWithdrawsAQueuedCommandAndWaitsForOneSent() async throws {
        let (c, t, _) = make()
        let sent = Task { try await c.send(LESetScanEnable(scanEnable: true)) }
        try await t.expect(LESetScanEnable(scanEnable: true).packet)
        let queued = Task { try await c.send(ReadBDADDR()) }
        #expect(await t.nextSent(timeout: .milliseconds(100)) == nil)
        sent.cancel()
        queued.cancel()
        await #expect(throws: CancellationError.self) { try await queued.value }
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .leSetScanEnable, returnParameters: [0])))
        _ = try await sent.value
        // The withdrawn command never goes out.
        #expect(await t.nextSent(timeout: .milliseconds(100)) == nil)
    }

    @Test func creditsLimitCommandsInFlight() async throws {
        let (c, t, _) = make()
        // One credit at start: the second command waits for the first's answer.
        let a = Task { try await c.send(ReadBDADDR()) }
        let b = Task { try await c.send(LEReadBufferSize()) }
        let first = await t.nextSent()
        #expect(await t.nextSent(timeout: .milliseconds(100)) == nil)
        let cc = { (op: HCIOpcode, r: [UInt8], n: UInt8) in HCIEvent.commandComplete(CommandComplete(numHCICommandPackets: n, commandOpcode: op, returnParameters: r)) }
        let addrReturn: [UInt8] = [0, 1, 2, 3, 4, 5, 6]
        let bufReturn: [UInt8] = [0, 27, 0, 8]
        if first == ReadBDADDR().packet {
            t.inject(cc(.readBDADDR, addrReturn, 1))
            #expect(await t.nextSent() == LEReadBufferSize().packet)
            t.inject(cc(.leReadBufferSize, bufReturn, 1))
        } else {
            t.inject(cc(.leReadBufferSize, bufReturn, 1))
            #expect(await t.nextSent() == ReadBDADDR().packet)
            t.inject(cc(.readBDADDR, addrReturn, 1))
        }
        #expect(try await a.value.address.description == "06:05:04:03:02:01")
        #expect(try await b.value.totalNumLEACLDataPackets == 8)
    }

    @Test func zeroCreditsHoldUntilNOP() async throws {
        let (c, t, _) = make()
        let a = Task { try await c.send(Reset()) }
        _ = await t.nextSent()
        t.inject(HCIEvent.commandComplete(CommandComplete(numHCICommandPackets: 0, commandOpcode: .reset, returnParameters: [0])))
        _ = try await a.value
        let b = Task { try await c.send(LEClearFilterAcceptList()) }
        #expect(await t.nextSent(timeout: .milliseconds(100)) == nil)
        // A Command Complete for NOP (opcode 0) returns the credit.
        t.inject(HCIEvent.commandComplete(CommandComplete(numHCICommandPackets: 1, commandOpcode: HCIOpcode(rawValue: 0), returnParameters: [])))
        #expect(await t.nextSent() == LEClearFilterAcceptList().packet)
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .leClearFilterAcceptList, returnParameters: [0])))
        _ = try await b.value
    }

    @Test func timeoutGivesTypedErrorAndFreesTheCredit() async throws {
        let (c, t, loop) = make(timeout: .seconds(2))
        let a = Task { try await c.send(Reset()) }
        _ = await t.nextSent()
        await loop.advanceTime(by: .milliseconds(1999))
        // Still waiting: it holds the one command credit, so the next stays queued.
        let b = Task { try await c.send(Reset()) }
        #expect(await t.nextSent(timeout: .milliseconds(50)) == nil)
        await loop.advanceTime(by: .milliseconds(1))
        await #expect(throws: HCIError.commandTimedOut(opcode: .reset, timeout: .seconds(2))) { try await a.value }
        // The credit came back: the next command goes out.
        #expect(await t.nextSent() == Reset().packet)
        t.inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: .reset, returnParameters: [0])))
        _ = try await b.value
    }

    @Test func transportClosingFailsPendingCommandsAndEndsStreams() async throws {
        let (c, t, _) = make()
        let events = await c.events()
        let a = Task { try await c.send(Reset()) }
        _ = await t.nextSent()
        t.fail(.endOfStream)
        await #expect(throws: HCIError.self) { try await a.value }
        var n = 0
        for await _ in events { n += 1 }
        #expect(n == 0)
        await #expect(throws: HCIError.self) { try await c.send(Reset()) }
    }

    @Test func malformedEventsAreSkippedNotFatal() async throws {
        let (c, t, _) = make()
        let events = await c.events()
        t.inject(.event(code: .disconnectionComplete, parameters: [0x00]))  // truncated
        t.inject(HCIEvent.hardwareError(HardwareError(hardwareCode: 7)))
        var it = events.makeAsyncIterator()
        #expect(await it.next() == .hardwareError(HardwareError(hardwareCode: 7)))
    }

    @Test func aclCreditsComeBackByCompletionAndDisconnection() async throws {
        let (c, t, _) = make()
        await c.setACLBufferCount(2)
        let p: @Sendable (UInt16) -> ACLDataPacket = { h in ACLDataPacket(handle: h, boundary: .firstNonFlushable, data: [1, 0, 4, 0, 0x0A]) }
        try await c.sendACL(p(1))
        try await c.sendACL(p(2))
        #expect(await c.aclCredits.available == 0)
        // A third waits; Number Of Completed Packets frees one.
        let third = Task { try await c.sendACL(p(1)) }
        _ = await t.nextSent(); _ = await t.nextSent()
        #expect(await t.nextSent(timeout: .milliseconds(100)) == nil)
        t.inject(HCIEvent.numberOfCompletedPackets(NumberOfCompletedPackets(entries: [.init(connectionHandle: 1, numCompletedPackets: 1)])))
        try await third.value
        #expect(await t.nextSent() == .acl(p(1)))
        // A fourth for handle 2 waits; handle 2 disconnects: its waiter fails, its credit returns.
        // Started on the controller's loop, so its wait is registered before the jobs
        // queued there after it: the read of the credits, then the event.
        let fourth = Task(executorPreference: c.taskExecutor) { try await c.sendACL(p(2)) }
        #expect(await c.aclCredits.available == 0)
        t.inject(HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: 2, reason: .remoteUserTerminatedConnection)))
        await #expect(throws: HCIError.connectionClosed(handle: 2)) { try await fourth.value }
        let credits = await c.aclCredits
        #expect(credits.available == 1)
        #expect(credits.outstanding == [1: 1])
        // A controller reporting more completions than were sent cannot inflate the pool.
        t.inject(HCIEvent.numberOfCompletedPackets(NumberOfCompletedPackets(entries: [.init(connectionHandle: 1, numCompletedPackets: 9)])))
        let events = await c.events()
        t.inject(HCIEvent.hardwareError(HardwareError(hardwareCode: 0)))
        var it = events.makeAsyncIterator()
        _ = await it.next()
        #expect(await c.aclCredits.available == 2)
    }

    @Test func initialisationMatchesTheRecordedRootcanalSession() async throws {
        // Replays Fixtures/rootcanal-init.btsnoop: our init must send exactly the host frames recorded there.
        let trace = try TraceReader.read(try Fixtures.bytes("rootcanal-init.btsnoop"))
        let (c, t, _) = make()
        let script = ScriptedTransport.script(from: trace)
        // A frame the recording does not have fails the play; closing the controller then
        // fails the command waiting for its answer (the testing loop's time never times it out).
        let played = Task {
            do { try await t.play(script) } catch {
                await c.close()
                throw error
            }
        }
        let info = try await c.initialize()
        try await played.value
        #expect(info.address.description == "DA:4C:10:DE:17:01")
        #expect(info.encryptionChangeV2)
        #expect(info.totalNumLEACLDataPackets == 20)
        #expect(info.leFeatures.contains(bit: LEFeatures.extendedAdvertising))
        // Rootcanal claims every state and combination §7.8.27 defines.
        #expect(info.leSupportedStates.map { LESupportedStates(rawValue: $0).summary } == "42 of 42 defined")
        #expect(await t.nextSent(timeout: .milliseconds(50)) == nil)
    }

    /// The mask a controller implementing some commands answers with (the virtual
    /// radio's): their §6.27 bits and no other; Reset is octet 5 bit 7, Read Local
    /// Supported Commands octet 14 bit 4.
    @Test func aMaskClaimsTheCommandsItIsBuiltFrom() {
        let mask = SupportedCommands(claiming: [.reset, .readLocalSupportedCommands, HCIOpcode(rawValue: 0xFC01)])
        #expect(mask.bytes.count == 64 && mask.claimedBits == [47, 116] && mask.bytes[5] == 0x80 && mask.bytes[14] == 0x10)
        #expect(mask.claimedNames == ["Reset", "Read Local Supported Commands"])
        #expect(mask.supports(.readLocalSupportedCommands) == true && mask.supports(.disconnect) == false)
    }

    /// §7.8.27: bits 0–41 are states and combinations, 42–63 reserved. What `btctl info`
    /// says of a mask: the defined ones it lacks by name, reserved bits by number.
    @Test func leSupportedStatesNameWhatIsMissingAndWhatIsReserved() {
        let all = LESupportedStates(rawValue: 0x3FF_FFFF_FFFF)
        #expect(all.claimedBits == Array(0...41) && LESupportedStates.definedBits == 0..<42)
        let some = LESupportedStates(rawValue: all.rawValue & ~(1 << 28 | 1 << 41) | 1 << 63)
        #expect(some.summary == "40 of 42 defined; not: Initiating + Connection (Central Role), Initiating + Connection (Peripheral Role); reserved bits set: 63")
        #expect(LESupportedStates.name(ofBit: 6) == "Initiating / Connection (Central Role)" && LESupportedStates.name(ofBit: 42) == nil
                && LESupportedStates.name(ofBit: -1) == nil)
        #expect(LESupportedStates(rawValue: 0).summary.hasPrefix("0 of 42 defined; not: Non-connectable Advertising, Scannable Advertising,"))
    }

    @Test func initialisationToleratesUnknownOptionalCommands() async throws {
        let (c, t, _) = make()
        let mask: [UInt8] = { var m = [UInt8](repeating: 0xFF, count: 64); m[41] &= ~0x20; return m }()  // no LE Read Buffer Size [v2]
        t.respond { p in
            guard case let .command(op, _) = p else { return [] }
            var r: [UInt8] = [0]
            switch op {
            case .readLocalVersionInformation: r += [9, 0, 0, 9, 0x5F, 0x00, 1, 0]
            case .readLocalSupportedCommands: r += mask
            case .readLocalSupportedFeatures, .leReadLocalSupportedFeatures: r += [UInt8](repeating: 0, count: 8)
            case .readBDADDR: r += [1, 2, 3, 4, 5, 6]
            case .readBufferSize: r += [0xFD, 0x03, 0x40, 0x08, 0x00, 0x01, 0x00]
            case .leReadBufferSize: r += [0x00, 0x00, 0x00]  // shared with BR/EDR
            case .leReadSupportedStates: r = [0x01]  // Unknown HCI Command
            case .leReadMaximumDataLength: r = [0x11]
            default: break
            }
            return [HCIEvent.commandComplete(CommandComplete(commandOpcode: op, returnParameters: r)).packet]
        }
        let info = try await c.initialize()
        #expect(info.leACLDataPacketLength == 1021)
        #expect(info.totalNumLEACLDataPackets == 8)
        #expect(info.skipped.map(\.opcode) == [.leReadSupportedStates, .leReadMaximumDataLength])
        #expect(info.skipped.map(\.status) == [.unknownCommand, .unsupportedFeatureOrParameterValue])
        #expect(!t.sent.contains(LEReadBufferSizeV2().packet))
    }

    /// A controller whose ACL buffers cannot carry an LE Data PDU (§7.8.2: a dedicated
    /// LE buffer holds at least 27 octets; zero means the shared BR/EDR ones) fails
    /// initialisation with a typed error naming the value, as Linux refuses it; one whose
    /// LE buffers are shared and large enough is taken.
    @Test(arguments: [
        // LE Read Buffer Size, Read Buffer Size (ACL length, SCO length, ACL count), taken?
        ([0x05, 0x00, 0x08], [0xFD, 0x03, 0x40, 0x08, 0x00], false),   // 5-octet LE buffers
        ([0x00, 0x00, 0x00], [0x00, 0x00, 0x40, 0x08, 0x00], false),   // shared, of 0 octets
        ([0xFB, 0x00, 0x00], [0xFD, 0x03, 0x40, 0x00, 0x00], false),   // shared, none of them
        ([0x00, 0x00, 0x08], [0x1A, 0x00, 0x40, 0x08, 0x00], false),   // shared, of 26 octets
        ([0x1B, 0x00, 0x01], [0x00, 0x00, 0x00, 0x00, 0x00], true),    // 27 octets, one buffer
        ([0x00, 0x00, 0x00], [0x1B, 0x00, 0x40, 0x02, 0x00], true),    // shared, 27 octets
    ] as [([UInt8], [UInt8], Bool)])
    func aControllerWithoutUsableLEBuffersIsRefused(le: [UInt8], shared: [UInt8], taken: Bool) async throws {
        let (c, t, _) = make()
        t.respond { p in
            guard case let .command(op, _) = p else { return [] }
            var r: [UInt8] = [0]
            switch op {
            case .readLocalVersionInformation: r += [9, 0, 0, 9, 0x5F, 0x00, 1, 0]
            case .readLocalSupportedCommands: r += [UInt8](repeating: 0xFF, count: 64)
            case .readLocalSupportedFeatures, .leReadLocalSupportedFeatures, .leReadSupportedStates: r += [UInt8](repeating: 0, count: 8)
            case .readBDADDR: r += [1, 2, 3, 4, 5, 6]
            case .readBufferSize: r += shared + [0x01, 0x00]
            case .leReadBufferSizeV2: r = [0x01]  // Unknown HCI Command: version 1 answers
            case .leReadBufferSize: r += le
            case .leReadMaximumDataLength: r += [0xFB, 0x00, 0x48, 0x08, 0xFB, 0x00, 0x48, 0x08]
            default: break
            }
            return [HCIEvent.commandComplete(CommandComplete(commandOpcode: op, returnParameters: r)).packet]
        }
        do {
            let info = try await c.initialize()
            #expect(taken, "taken with \(info.leACLDataPacketLength) octets × \(info.totalNumLEACLDataPackets)")
            #expect(info.leACLDataPacketLength >= 27 && info.totalNumLEACLDataPackets > 0)
        } catch let HCIError.malformedResponse(_, .invalidValue(what, _)) {
            #expect(!taken, "refused: \(what)")
            #expect(what.contains("ACL"))
        }
    }
}

enum Fixtures {
    static func bytes(_ name: String) throws -> [UInt8] {
        let root = String(#filePath).components(separatedBy: "/Tests/").first ?? "."
        guard let fp = fopen(root + "/Fixtures/" + name, "rb") else { throw DecodeError.invalidValue(what: "fixture \(name)", value: 0) }
        defer { fclose(fp) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = fread(&buf, 1, buf.count, fp)
            if n <= 0 { break }
            out += buf[0..<n]
        }
        return out
    }
}
