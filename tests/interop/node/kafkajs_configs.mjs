// kafkajs 2.2.4's admin client against Skiff: creates a topic, alters its configs with the
// legacy AlterConfigs (admin.alterConfigs: the whole set of overrides replaced), describes them,
// and prints one JSON line per step. Usage: node kafkajs_configs.mjs BOOTSTRAP TOPIC
import kafkajs from 'kafkajs';

const { Kafka, ConfigResourceTypes, logLevel } = kafkajs;

const [bootstrap, topic] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'skiff-kafkajs', brokers: [bootstrap], logLevel: logLevel.NOTHING });
const admin = kafka.admin();
const out = (event, data) => console.log(JSON.stringify({ event, ...data }));
const describe = async () => {
  const r = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
      configNames: ['retention.ms', 'cleanup.policy', 'max.message.bytes'] }],
  });
  const entries = {};
  for (const e of r.resources[0].configEntries) {
    entries[e.configName] = { value: e.configValue, isDefault: e.isDefault };
  }
  return entries;
};

try {
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 1,
    configEntries: [{ name: 'retention.ms', value: '60000' }] }] });
  out('created', { configs: await describe() });
  await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC,
    name: topic, configEntries: [{ name: 'cleanup.policy', value: 'compact' },
      { name: 'max.message.bytes', value: '200000' }] }] });
  out('altered', { configs: await describe() });
  try {
    await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC,
      name: topic, configEntries: [{ name: 'retention.ms', value: 'soon' }] }] });
    out('bad', { error: null });
  } catch (e) {
    out('bad', { error: e.type || e.name, message: e.message });
  }
  out('after_bad', { configs: await describe() });
} catch (e) {
  out('failed', { error: e.type || e.name, message: e.message });
  process.exitCode = 1;
} finally {
  await admin.disconnect();
}
