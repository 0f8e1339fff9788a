// btctl radio: the virtual radio as a controller server, as Rootcanal's HCI port and
// Bumble's `bumble-controllers` serve theirs: each controller listens on a TCP port of
// its own for a host speaking H4 (Bumble's tcp-client, a daemon on this stack, another
// btctl with -t tcp:HOST:PORT). A host that connects gets a fresh controller at that
// port's address; when it leaves, the controller leaves the radio (its links end for
// their peers with Connection Timeout) and the port waits for the next host.

import ArgumentParser
import Foundation
import HCI
import Logging
import Snoop
import Synchronization
import Transports
import VirtualHCI

struct Radio: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve the virtual radio's controllers on TCP ports (H4), for any host: Bumble, a daemon, another btctl.",
        discussion: """
            Each of --controllers controllers listens on a port of its own (--port and \
            the ones after it; 0 picks free ones), printed with the controller's address \
            as `tcp:HOST:PORT`, the transport to give a host (Bumble: tcp-client:HOST:PORT). \
            A host that connects gets a fresh controller at that address; when it \
            disconnects, the controller leaves the radio (its peers see their links end \
            with Connection Timeout) and the port takes the next host. Advertising is heard \
            once per --tick (each a advertising event of every set). --fire-alarm adds the \
            fire-alarm sender as a device on the radio (FireAlarm-B3, C0:FF:EE:00:00:01). \
            --bluetooth5 gives the controllers the extended advertising, scanning and \
            connection commands. Devices are 1 m apart unless --distance says otherwise \
            (A,B,METRES: A and B are controller numbers or fire-alarm; repeatable): \
            what a scanner hears as RSSI follows the radio's path-loss model. Status \
            lines go to stderr (with --json, one object per line on stdout, \
            docs/schemas/radio.schema.json). Ends on SIGINT/SIGTERM or --duration.
            """)

    @Option(help: ArgumentHelp("How many controllers to serve, 1 to 16.", valueName: "N"))
    var controllers = 2

    @Option(help: ArgumentHelp("The first controller's TCP port; the next ones follow it. 0 (default): free ports.", valueName: "PORT"))
    var port: UInt16 = 0

    @Option(help: ArgumentHelp("The address to listen on.", valueName: "HOST"))
    var listen = "127.0.0.1"

    @Flag(help: "Bluetooth 5 controllers: extended advertising, scanning and connecting, periodic advertising, LE 2M and LE Coded.")
    var bluetooth5 = false

    @Flag(help: "Also a fire-alarm sender on the radio (FireAlarm-B3 at C0:FF:EE:00:00:01), advertising and serving its database.")
    var fireAlarm = false

    @Option(parsing: .unconditionalSingleValue, help: ArgumentHelp("How far apart two devices are: A,B,METRES, each of A and B a controller number (1 to N) or fire-alarm, METRES 0.1 to 10000 (default 1 m). Repeatable.", valueName: "A,B,METRES"))
    var distance: [String] = []

    @Option(parsing: .unconditional, help: ArgumentHelp("Milliseconds between two advertising events, 1 to 10000.", valueName: "MS"))
    var tick: Double = 50

    @Option(parsing: .unconditional, help: ArgumentHelp("Stop after this many seconds, 0.1 to 86400 (default: until interrupted).", valueName: "SECONDS"))
    var duration: Double?

    @Flag(help: "One JSON object per line on stdout.")
    var json = false

    @Option(help: ArgumentHelp("Record every host's traffic to a btsnoop file in the Linux monitor format: controller N is adapter hci(N-1), with a New Index record when a host connects and a Delete Index when it leaves (btctl trace show, Wireshark).", valueName: "FILE"))
    var btsnoop: String?

    @Option(help: ArgumentHelp("The same as pcap (link type 254, Linux monitor).", valueName: "FILE"))
    var pcap: String?

    @Flag(name: .shortAndLong, help: "Log each host's connection to stderr.")
    var verbose = false

    func validate() throws {
        guard (1...16).contains(controllers) else { throw ValidationError("--controllers must be 1 to 16, not \(controllers)") }
        guard tick.isFinite, (1...10_000).contains(tick) else { throw ValidationError("--tick must be between 1 and 10000 ms, not \(tick)") }
        if let d = duration, !(d.isFinite && (0.1...86_400).contains(d)) { throw ValidationError("--duration must be between 0.1 and 86400 seconds, not \(d)") }
        if btsnoop != nil, pcap != nil { throw ValidationError("give --btsnoop or --pcap, not both") }
        _ = try distances()
        if port != 0, Int(port) + controllers - 1 > Int(UInt16.max) {
            throw ValidationError("--port \(port) leaves no room for \(controllers) ports below 65536")
        }
    }

    /// --distance's pairs: the two devices' addresses and the metres between them.
    func distances() throws -> [(BluetoothAddress, BluetoothAddress, Double)] {
        try distance.map { spec in
            let parts = spec.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 3 else { throw ValidationError("--distance takes A,B,METRES, not \(spec)") }
            func device(_ s: String) throws -> BluetoothAddress {
                if s == "fire-alarm" {
                    guard fireAlarm else { throw ValidationError("--distance \(spec): fire-alarm needs --fire-alarm") }
                    return VirtualPeer.peerAddress
                }
                guard let i = Int(s), (1...controllers).contains(i) else {
                    throw ValidationError("--distance \(spec): \(s) is neither a controller (1 to \(controllers)) nor fire-alarm")
                }
                return Self.address(i)
            }
            let (a, b) = (try device(parts[0]), try device(parts[1]))
            guard a != b else { throw ValidationError("--distance \(spec) names one device twice") }
            guard let metres = Double(parts[2]), metres.isFinite, (0.1...10_000).contains(metres) else {
                throw ValidationError("--distance \(spec): the metres must be 0.1 to 10000")
            }
            return (a, b, metres)
        }
    }

    /// Controller `index`'s public address: C0:FF:EE:00:01:NN (the fire-alarm sender is C0:FF:EE:00:00:01).
    static func address(_ index: Int) -> BluetoothAddress {
        BluetoothAddress(value: 0xC0FF_EE00_0100 | UInt64(index & 0xFF))
    }

    func run() async throws {
        var writer: TraceFileWriter?
        if let path = btsnoop ?? pcap {
            let output: TraceEncoder.Output = pcap != nil ? .pcap(linkType: TraceFormat.linkTypeMonitor) : .btsnoop(datalink: TraceFormat.btsnoopMonitor)
            do { writer = try TraceFileWriter(path: path, output: output) } catch { throw CLIError("cannot record to \(path): \(error)") }
            let w = writer
            Interrupt.atExit { w?.close() }
        }
        defer { writer?.close() }
        let server = RadioServer(json: json, bluetooth5: bluetooth5, writer: writer)
        func say(_ fields: [(String, JSONValue)], _ text: String) { server.say(fields, text) }
        var logger = Logger(label: "btctl") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .debug : .warning
        let radio = VirtualRadio()
        for (a, b, metres) in try distances() { await radio.setDistance(metres, between: a, and: b) }
        VirtualPeer.tick(radio, every: .microseconds(Int64(tick * 1000)))
        if fireAlarm {
            do { try await VirtualPeer.addFireAlarmSender(to: radio, extendedAdvertising: bluetooth5) } catch {
                throw CLIError("the fire-alarm sender did not start: \(error)")
            }
            say([("event", .string("device")), ("name", .string("FireAlarm-B3")), ("address", .string(VirtualPeer.peerAddress.description))],
                "FireAlarm-B3 (\(VirtualPeer.peerAddress)) is on the radio")
        }
        var listeners: [H4Listener] = []
        for i in 1...controllers {
            do { listeners.append(try H4Listener(host: listen, port: port == 0 ? 0 : port + UInt16(i - 1))) } catch {
                for l in listeners { l.close() }
                throw CLIError("cannot listen on \(listen):\(port == 0 ? 0 : Int(port) + i - 1): \(error)")
            }
            let l = listeners[i - 1]
            say([("event", .string("controller")), ("index", .int(i)), ("address", .string(Self.address(i).description)),
                 ("transport", .string("tcp:\(l.host):\(l.port)")), ("bluetooth5", .bool(bluetooth5))],
                "controller \(i): \(Self.address(i)) on tcp:\(l.host):\(l.port)")
        }
        let bound = listeners
        Interrupt.onSignal { for l in bound { l.close() } }
        let hosts = Hosts(), log = logger
        let servers = listeners.enumerated().map { (i, l) in
            Task { await server.serve(l, index: i + 1, radio: radio, hosts: hosts, logger: log) }
        }
        if let duration { await Interrupt.sleep(for: cliDuration(seconds: duration)) } else { await Interrupt.waitForSignal() }
        for l in listeners { l.close() }
        for h in hosts.all { await h.close() }
        for s in servers { await s.value }
        if json { emit(.object([("event", .string("stopped"))])) }
    }
}

/// What serves the radio's ports, apart from the command's arguments.
struct RadioServer: Sendable {
    let json: Bool
    let bluetooth5: Bool
    /// --btsnoop/--pcap: every packet, by adapter index (controller N is N-1).
    let writer: TraceFileWriter?

    /// Records `content` for controller `index` (nothing without a recording).
    func record(_ content: TraceRecord.Content, _ direction: TraceRecord.Direction, index: Int) {
        _ = writer?.write(TraceRecord(timestampMicros: RecordingTransport.wallClockMicros(), direction: direction, content: content,
                                      adapterIndex: UInt16(index - 1)))
    }

    /// The monitor's New Index record (type primary, bus virtual, the address, the name "radioN").
    static func newIndex(_ index: Int) -> [UInt8] {
        let name = Array("radio\(index)".utf8.prefix(7))  // NUL-terminated in 8 octets
        return [0x00, 0x00] + Radio.address(index).bytes + name + [UInt8](repeating: 0, count: 8 - name.count)
    }

    func say(_ fields: [(String, JSONValue)], _ text: String) {
        if json { emit(.object(fields)); fflush(nil) } else { note(text) }
    }

    /// Takes hosts on `listener`, one at a time, each with a fresh controller, until the
    /// listener closes.
    func serve(_ listener: H4Listener, index: Int, radio: VirtualRadio, hosts: Hosts, logger: Logger) async {
        while true {
            let host: ChannelTransport
            do { host = try await listener.accept(logger: logger) } catch { return }
            hosts.add(host)
            let controller = await radio.makeController(address: Radio.address(index), extendedAdvertising: bluetooth5)
            say([("event", .string("host_connected")), ("index", .int(index))], "controller \(index): a host connected")
            record(.monitor(opcode: 0, data: Self.newIndex(index)), .unknown, index: index)
            // One task per direction; `send` waits, so a slow host slows its controller's
            // packets to it (the controller keeps its newest 65,536 and counts the rest).
            let down = Task {
                do {
                    for try await p in controller.inbound {
                        record(.packet(p), .controllerToHost, index: index)
                        try await host.send(p)
                    }
                } catch {}
                await host.close()
            }
            do {
                for try await p in host.inbound {
                    record(.packet(p), .hostToController, index: index)
                    try await controller.send(p)
                }
            } catch {}
            await radio.remove(controller)
            await host.close()
            await down.value
            hosts.remove(host)
            record(.monitor(opcode: 1, data: []), .unknown, index: index)
            // What the controller could not hand its host (a host that fell 65,536 packets behind).
            let dropped = controller.droppedInbound.count
            say([("event", .string("host_disconnected")), ("index", .int(index)), ("dropped", .int(dropped))],
                "controller \(index): the host left; its controller left the radio\(dropped == 0 ? "" : " (\(dropped) packets it fell behind on were dropped)")")
        }
    }
}

/// The hosts connected now, to close at the end.
final class Hosts: Sendable {
    private let list = Mutex<[ChannelTransport]>([])
    func add(_ h: ChannelTransport) { list.withLock { $0.append(h) } }
    func remove(_ h: ChannelTransport) { list.withLock { $0.removeAll { $0 === h } } }
    var all: [ChannelTransport] { list.withLock { $0 } }
}
