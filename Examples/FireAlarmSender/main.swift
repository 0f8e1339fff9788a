// FireAlarmSender: the peripheral of the fire-alarm example. Advertises, serves the
// alarm state, text and floor plan, and raises the alarm after --alarm-after
// seconds or when "alarm" is typed on stdin ("clear" clears it, "quit" stops).
// Uses only the BLE facade. `--transport virtual` runs the whole session (with a
// receiver) on the in-process radio.

import ArgumentParser
import BLE
import FireAlarm
import Foundation
import Logging

@main
struct FireAlarmSenderCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "FireAlarmSender", abstract: "The fire-alarm sender (peripheral).")

    @Option(name: [.customShort("t"), .long], help: ArgumentHelp("Controller: \(BluetoothHost.transportHelp), or virtual. Default: $BTCTL_TRANSPORT, else hci0.", valueName: "SPEC"))
    var transport: String?
    @Flag(help: "One JSON object per event on stdout.") var json = false
    @Flag(name: .shortAndLong, help: "Log protocol traffic to stderr.") var verbose = false
    @Option(help: ArgumentHelp("HCI command timeout in seconds (0.01 to 3600), as btctl's --timeout.", valueName: "SECONDS")) var timeout: Double = 5
    @Option(help: "Advertised name.") var name = "FireAlarm"
    @Option(help: "The alarm text.") var text = FireAlarmProfile.defaultText
    @Option(help: ArgumentHelp("Serve this file as the floor plan (default: a built-in SVG).", valueName: "FILE")) var floorPlan: String?
    @Option(help: ArgumentHelp("Raise the alarm this many seconds after the first central subscribes (virtual: after the receiver read the alarm state clear).", valueName: "SECONDS")) var alarmAfter: Double?

    func validate() throws {
        guard timeout.isFinite, (0.01...3600).contains(timeout) else { throw ValidationError("--timeout must be between 0.01 and 3600 seconds, not \(timeout)") }
        if let a = alarmAfter, !(a >= 0 && a.isFinite) { throw ValidationError("--alarm-after must be a number of seconds ≥ 0") }
    }

    func run() async throws {
        let log = FireAlarmEvent.printer(json: json)
        var logger = Logger(label: "FireAlarmSender") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .trace : .warning
        let spec = transport ?? ProcessInfo.processInfo.environment["BTCTL_TRANSPORT"] ?? "hci0"
        if spec == "virtual" {
            _ = try await FireAlarmDemo.run(alarmAfter: .milliseconds(Int((alarmAfter ?? 0.3) * 1000)), logger: logger, log: log)
            return
        }
        var image = FireAlarmProfile.defaultFloorPlan
        if let path = floorPlan {
            guard let d = FileManager.default.contents(atPath: path) else { throw ValidationError("cannot read \(path)") }
            image = Array(d)
        }
        let host = try BluetoothHost.open(spec, logger: logger, commandTimeout: .milliseconds(Int((timeout * 1000).rounded())))
        try await host.start()
        let sender = FireAlarmSender(host: host, name: name, text: text, floorPlan: image, log: log)
        try await sender.start()
        if let a = alarmAfter {
            Task {
                guard await sender.waitForSubscriber(within: .seconds(3600)) else { return }
                try await Task.sleep(for: .milliseconds(Int(a * 1000)))
                try await sender.raiseAlarm()
            }
        }
        // Commands from stdin; end of input keeps serving until the transport closes.
        let lines = AsyncStream<String> { c in
            Thread.detachNewThread {
                while let l = readLine() { c.yield(l) }
                c.finish()
            }
        }
        for await line in lines {
            switch line.trimmingCharacters(in: .whitespaces) {
            case "alarm": try await sender.raiseAlarm()
            case "clear": try await sender.clearAlarm()
            case "quit": await host.close(); return
            case "": continue
            default: FileHandle.standardError.write(Data("commands: alarm, clear, quit\n".utf8))
            }
        }
        for await s in host.states() { if case .transportClosed = s { return } }
    }
}
