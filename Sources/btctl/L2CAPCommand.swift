// btctl l2cap listen|connect: a credit-based channel (LE or enhanced mode; `listen`
// takes either) as netcat does a TCP
// connection (docs/btctl.md). Standard input goes to the channel in SDUs of at most
// the peer's MTU; what the peer sends goes to standard output as it arrives (raw
// bytes, or one JSON object per SDU with --json). After standard input ends, btctl
// keeps receiving until the peer closes the channel or nothing came for --wait
// seconds, then closes the channel and the link.

import ArgumentParser
import Dispatch
import Foundation
import BLE
import GAP
import HCI
import L2CAP
import Snoop
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

struct L2CAP_: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "l2cap", abstract: "LE credit-based channels, netcat-style.", subcommands: [Listen.self, Connect.self])

    struct ChannelOptions: ParsableArguments {
        @Option(help: "The largest SDU we take (23...65535).")
        var mtu: UInt16 = 2048
        @Option(help: "The largest K-frame payload we take (23...65533).")
        var mps: UInt16 = 247
        @Option(help: "Credits (K-frames) we grant at the start.")
        var credits: UInt16 = 8
        @Option(help: ArgumentHelp("After standard input ends, seconds to keep receiving while the peer is quiet.", valueName: "SECONDS"))
        var wait: Double = 2

        var parameters: CreditBasedParameters { CreditBasedParameters(mtu: mtu, mps: mps, initialCredits: credits) }

        func validate() throws {
            guard mtu >= 23 else { throw ValidationError("--mtu must be at least 23") }
            guard (23...65533).contains(mps) else { throw ValidationError("--mps must be 23...65533") }
            guard wait >= 0, wait <= 3600 else { throw ValidationError("--wait must be 0...3600 seconds") }
        }
    }

    struct Listen: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Advertise, accept one channel to SPSM, pipe it to stdin/stdout.")
        @OptionGroup var options: ControllerOptions
        @OptionGroup var channel: ChannelOptions
        @Argument(help: "The SPSM to accept (decimal or 0x hex).", transform: parseSPSM)
        var spsm: UInt16
        @Option(help: "The name to advertise.")
        var name: String = "btctl"
        @Option(help: ArgumentHelp("Seconds to wait for a peer.", valueName: "SECONDS"))
        var duration: Double = 60
        @Option(help: ArgumentHelp("The security a link needs before the channel opens: none, encrypted, authenticated or secure-connections "
                                   + "(a key of at least --minimum-key-size octets). A peer asking on a link without it is refused with the spec's result.",
                                   valueName: "LEVEL"),
                transform: parseSecurityLevel)
        var security: SecurityLevel = .none
        @OptionGroup(title: "Pairing (when a central asks; standard input is the channel's, so only --passkey and --yes answer prompts)")
        var pairing: PairingOptions

        func validate() throws {
            guard duration > 0, duration <= 86_400 else { throw ValidationError("--duration must be 0...86400 seconds") }
            try pairing.validate(security: security)
        }

        func run() async throws {
            let answers = ConsoleAnswers.none()
            let store = AdapterBondStore(path: pairing.store.bonds)
            let (host, writer) = try await options.openHost(security: pairing.securityOptions(store: store, json: options.json, answers: answers),
                                                            deviceName: name)
            defer { writer?.close() }
            do {
                let info = try await host.start()
                store.bind(adapter: info.address)
                // Pairings and encryptions are said as they happen (JSON lines, or stderr).
                let securityEvents = await host.securityEvents()
                let json = options.json
                let securityPrinter = Task {
                    for await e in securityEvents { if let (fields, text) = securityReport(e) { announce(json: json, fields, text) } }
                }
                defer { securityPrinter.cancel() }
                let required = ChannelSecurity(level: security, minimumKeySize: Int(pairing.minimumKeySize))
                let incoming = await host.publishChannel(spsm: spsm, parameters: channel.parameters, security: required)
                var ad = AdvertisingData()
                ad.flags = 0x06
                ad.localName = name
                try await host.peripheral.startAdvertising(ad, intervalMilliseconds: 30)
                // The address a peer connects to (the controller's public one: listen advertises with it).
                announce(json: options.json, [("event", .string("listening")), ("spsm", .int(Int(spsm))), ("address", .string(info.address.description))],
                    "listening on SPSM 0x\(hex4(spsm)) as \"\(name)\" (\(info.address))")
                guard let ch = await firstElement(incoming, within: cliDuration(seconds: duration), on: host.controller.loop) else {
                    throw CLIError("no channel to SPSM 0x\(hex4(spsm)) within \(duration) s")
                }
                try? await host.peripheral.stopAdvertising()
                try await pipe(ch, options: options, wait: channel.wait)
                if !Interrupt.requested { await host.shutdown() }
            } catch {
                await host.close()
                throw error
            }
        }
    }

    struct Connect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Connect to a peer's SPSM, pipe the channel to stdin/stdout.")
        @OptionGroup var options: ControllerOptions
        @OptionGroup var peer: PeerOptions
        @OptionGroup var channel: ChannelOptions
        @Option(help: "The SPSM to connect to (decimal or 0x hex).", transform: parseSPSM)
        var spsm: UInt16
        @Flag(help: "Open the channel in enhanced credit-based mode (Credit Based Connection Request; --mtu and --mps at least 64).")
        var enhanced = false
        @Option(help: ArgumentHelp("Bring the link to this security before asking for the channel: none, encrypted, authenticated or "
                                   + "secure-connections (encrypts from the bond, else pairs). Without it, a refusal for security pairs or encrypts "
                                   + "and asks once more.", valueName: "LEVEL"),
                transform: parseSecurityLevel)
        var security: SecurityLevel = .none
        @OptionGroup(title: "Pairing (--security, or when the peer refuses for security; standard input is the channel's, so only --passkey and --yes answer prompts)")
        var pairing: PairingOptions

        func validate() throws {
            if enhanced, channel.mtu < 64 || channel.mps < 64 { throw ValidationError("--enhanced needs --mtu and --mps of at least 64") }
            try pairing.validate(security: security)
        }

        func run() async throws {
            let (session, writer) = try await PeerSession.open(options, peer, pairing, answers: .none())
            defer { writer?.close() }
            let ch: L2CAPChannel
            do {
                if security > .none { try await session.secure(security) }
                ch = try await session.reportingSecurity {
                    if enhanced {
                        let opened = try await session.peripheral.openChannels(spsm: spsm, count: 1, parameters: channel.parameters)
                        guard let first = opened.first else { throw L2CAPChannelError.noResources }
                        return first
                    }
                    return try await session.peripheral.openChannel(spsm: spsm, parameters: channel.parameters)
                }
            } catch let error as CLIError {
                await session.close()
                throw error
            } catch {
                await session.close()
                throw CLIError("cannot open a channel to SPSM 0x\(hex4(spsm)): \(error)")
            }
            try await pipe(ch, options: options, wait: channel.wait)
            await session.close()
        }
    }
}

/// `none`, `encrypted`, `authenticated`, `secure-connections`: LE security mode 1's levels.
func parseSecurityLevel(_ s: String) throws -> SecurityLevel {
    guard let level = SecurityLevel.allCases.first(where: { $0.description == s }) else {
        throw ValidationError("unknown security level '\(s)' (none, encrypted, authenticated, secure-connections)")
    }
    return level
}

func parseSPSM(_ s: String) throws -> UInt16 {
    guard let v = cliUInt16(s), v > 0 else { throw ValidationError("bad SPSM '\(s)'") }
    return v
}

/// Standard input to `ch`, `ch` to standard output, until both are done.
private func pipe(_ ch: L2CAPChannel, options: ControllerOptions, wait: Double) async throws {
    let json = options.json
    announce(json: json, [("event", .string("open")), ("mtu", .int(Int(ch.info.remote.mtu))), ("mps", .int(Int(ch.info.remote.mps))),
                          ("local_mtu", .int(Int(ch.info.local.mtu))), ("enhanced", .bool(ch.info.enhanced))], "\(ch)")
    let input = StdinChunks(size: ch.maximumSendSize)
    let lastHeard = LastHeard()
    let progress = TransferProgress(json: json)
    // Finishes when the channel's SDUs end (the peer closed or the link went).
    let (channelEnded, endChannel) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    let receiving = Task {
        defer { endChannel.finish() }
        do {
            for try await sdu in ch.sdus {
                lastHeard.touch()
                progress.willPrint()
                if json { announce(json: true, [("event", .string("sdu")), ("length", .int(sdu.count)), ("value", .string(sdu.hexString))], "") } else { FileHandle.standardOutput.write(Data(sdu)) }
                progress.add(received: sdu.count)
            }
            return nil as String?
        } catch {
            return "\(error)"
        }
    }
    do {
        for await chunk in input.chunks {
            try await ch.send(chunk)
            progress.add(sent: chunk.count)
            input.taken()
        }
    } catch {
        announce(json: json, [("event", .string("error")), ("error", .string("\(error)"))], "send failed: \(error)")
    }
    // Standard input is done: keep receiving until the peer closes the channel or has
    // been quiet for `wait` (a timer to that moment, moved on by what arrives), then close.
    await withTaskGroup(of: Void.self) { g in
        g.addTask { for await _ in channelEnded {} }
        g.addTask {
            while !Task.isCancelled {
                let left = lastHeard.left(of: wait)
                if left <= .zero { return }
                try? await Task.sleep(for: left)
            }
        }
        await g.next()
        g.cancelAll()
    }
    await ch.close()
    let failure = await receiving.value
    let (sent, received) = progress.clear()
    let reason = await ch.closeReason
    announce(json: json, [("event", .string("closed")), ("sent", .int(sent)), ("received", .int(received)), ("reason", .string(failure ?? reason?.description ?? "closed"))],
        "closed: sent \(sent) bytes, received \(received)\(failure.map { " (\($0))" } ?? "")")
}

/// Bytes sent and received so far (the closing line's totals), on the terminal's
/// status line (both directions update it, from their own tasks).
private final class TransferProgress: Sendable {
    private let state: Mutex<(sent: Int, received: Int, live: LiveStatus)>
    init(json: Bool) { state = Mutex((0, 0, LiveStatus(json: json))) }
    func add(sent: Int = 0, received: Int = 0) {
        state.withLock { s in
            s.sent += sent
            s.received += received
            s.live.update("sent \(bytesText(s.sent)), received \(bytesText(s.received))")
        }
    }
    func willPrint() { state.withLock { $0.live.willPrint() } }
    /// Erases the status line; the totals for the closing line.
    func clear() -> (sent: Int, received: Int) {
        state.withLock { s in
            s.live.clear()
            return (s.sent, s.received)
        }
    }
}

/// When the channel last delivered something.
private final class LastHeard: Sendable {
    private let at = Mutex(ContinuousClock.now)
    func touch() { at.withLock { $0 = .now } }
    /// How long until the channel has been quiet for `seconds`.
    func left(of seconds: Double) -> Duration { cliDuration(seconds: seconds) - at.withLock { ContinuousClock.now - $0 } }
}

/// Standard input in chunks of at most `size` bytes, read on a thread of its own that
/// stops reading while 4 chunks wait to be sent (`taken()` frees a slot): the channel's
/// credits pace how fast stdin is read. The stream's buffer is bounded by those slots.
private final class StdinChunks: Sendable {
    let chunks: AsyncStream<[UInt8]>
    // Created at 0 and signalled up to 4: libdispatch traps when a semaphore is freed
    // below its initial value, which the reader leaves it at when input ends.
    private let slots = DispatchSemaphore(value: 0)

    init(size: Int) {
        for _ in 0..<4 { slots.signal() }
        let (stream, continuation) = AsyncStream<[UInt8]>.makeStream(bufferingPolicy: .unbounded)
        chunks = stream
        let slots = self.slots
        let size = Swift.max(1, size)
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: size)
            while true {
                slots.wait()
                let n = buffer.withUnsafeMutableBytes { Glibc.read(0, $0.baseAddress, size) }
                if n < 0 && errno == EINTR { slots.signal(); continue }
                guard n > 0 else { break }
                continuation.yield(Array(buffer[0..<n]))
            }
            continuation.finish()
        }
        thread.start()
    }

    func taken() { slots.signal() }
}
