// btctl demo: the fire-alarm example (sender and receiver) on the in-process
// virtual radio, printed as it happens. No hardware, no Rootcanal, no root.

import ArgumentParser
import FireAlarm
import Foundation
import Logging

struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the fire-alarm sender and receiver on the in-process virtual radio.",
        discussion: """
        The sender advertises and serves an alarm state, a text and a floor plan; the receiver scans, \
        connects to the nearest sender, subscribes, and on the alarm reads the text, estimates the \
        distance, downloads the floor plan (checked with its CRC-32) and acknowledges. Each line is \
        one step, from the side that took it.
        """)

    @Flag(help: "One JSON object per event on stdout.") var json = false
    @Flag(name: .shortAndLong, help: "Log protocol traffic to stderr.") var verbose = false
    @Option(parsing: .unconditional, help: ArgumentHelp("Metres between sender and receiver, 0.1 to 1000 (the radio's path-loss model sets the RSSI).", valueName: "METRES"))
    var distance: Double = 3.5
    @Option(help: ArgumentHelp("Save the downloaded floor plan in this directory.", valueName: "DIR")) var save: String?

    func validate() throws {
        guard distance >= 0.1, distance <= 1000, distance.isFinite else { throw ValidationError("--distance must be between 0.1 and 1000 metres, not \(distance)") }
        if let save {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: save, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw ValidationError("--save: \(save) is not a directory (create it first)")
            }
            guard FileManager.default.isWritableFile(atPath: save) else { throw ValidationError("--save: \(save) is not writable") }
        }
    }

    func run() async throws {
        var logger = Logger(label: "btctl") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .trace : .warning
        let outcome = try await FireAlarmDemo.run(distance: distance, saveDirectory: save, logger: logger, log: FireAlarmEvent.printer(json: json))
        guard !outcome.floorPlan.isEmpty, !outcome.acknowledgements.isEmpty else { throw CLIError("the demo ended without a floor plan or an acknowledgement") }
    }
}
